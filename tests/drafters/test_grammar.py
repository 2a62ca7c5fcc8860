"""Constrained decoding (``core.grammar``) under speculation: every verified position is
masked by what the grammar allows after its own history, so speculative output equals
plain constrained decoding token for token, with any drafter, linear or tree; the
``grammar`` drafter's forced tokens are accepted (the masks against a fresh matcher per
position: tests/core/test_grammar.py). Tiny random-weight models with a tiny byte-level
tokenizer keep this fast; the real-model checks are marked slow."""

import json
import random
from functools import lru_cache

import pytest
from conftest import TINY_VOCAB, assert_speculated, cached_tiny, real_model, requires_model

from specdec.decode.generation import Generation
from specdec.core.grammar import Grammar, response_grammar
from specdec.core.sampling import SamplingParams
from specdec.decode.request import Request
from specdec.drafters.chain import ChainDrafter
from specdec.drafters.grammar import GrammarDrafter
from specdec.drafters.ngram import NgramDrafter

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "n", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 6},
                         "n": {"type": "integer", "minimum": 0, "maximum": 999},
                         "tags": {"type": "array", "maxItems": 3,
                                  "items": {"enum": ["ab", "cd", "abcd"]}}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}


class TinyTokenizer:
    """A byte-level BPE tokenizer of 53 tokens (EOS = 0) over the tiny models' 64 ids:
    single characters plus a few multi-character JSON pieces; ids 53..63 have no text,
    so a grammar never allows them."""

    eos_token_ids = {0}

    def __init__(self):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        byte = _byte_chars()
        pieces = list('{}[]":, abcdefghijklmnopqrstuvwxyz0123456789.-\n') + \
            ['"name"', '": "', '", "', "ab", "cd"]
        vocab = {"<eos>": 0}
        for p in pieces:
            vocab["".join(byte[b] for b in p.encode())] = len(vocab)
        self.backend_tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        self.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        self.backend_tokenizer.decoder = decoders.ByteLevel()
        self.text = {i: p for i, p in enumerate(["<eos>", *pieces])}

    def decode(self, ids):
        return "".join(self.text.get(i, "?") for i in ids if i != 0)


def _byte_chars():
    """GPT-2's byte-to-unicode table (what a byte-level BPE vocabulary is written in)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@lru_cache(maxsize=None)
def tiny_tokenizer():
    return TinyTokenizer()


def grammar():
    return Grammar(tiny_tokenizer(), response_grammar(FORMAT), TINY_VOCAB)


def run(model, prompt, drafter=None, with_drafter_grammar=False, **kw):
    g = grammar()
    if with_drafter_grammar:
        drafter = ChainDrafter([GrammarDrafter(), drafter]) if drafter else GrammarDrafter()
    log = []
    req = Request(model, prompt, Generation.of(max_tokens=60, **kw), drafter=drafter, eos={0}, processors=[g],
                  step_log=log)
    req.start()
    req.prefill()
    return [e.token for e in req.run()], log


def prompt(seed):
    rng = random.Random(seed)
    return [rng.randrange(1, 53) for _ in range(12)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_constrained_speculation_equals_plain_constrained_decoding(arch):
    from decode.test_tree_attention import TruthTreeDrafter

    model, logs = cached_tiny(arch), []
    for seed in range(3):
        ref, _ = run(model, prompt(seed))
        text = tiny_tokenizer().decode(ref)
        value = json.loads(text)  # the grammar holds even a random model to the schema
        assert set(value) == {"name", "n", "tags"} and len(value["name"]) <= 6, text
        for drafter, extra in ((NgramDrafter(1, 3), {}), (None, {}),
                               (TruthTreeDrafter(ref, TINY_VOCAB, seed=seed), {"draft_tree_budget": 8})):
            out, log = run(model, prompt(seed), drafter, with_drafter_grammar=drafter is None or not extra,
                           num_draft_tokens=4, **extra)
            assert out == ref, (arch, seed, type(drafter).__name__)
            logs.append(log)
    assert_speculated(*logs, what=f"grammar {arch}")


def test_the_grammar_drafter_proposes_forced_tokens_and_they_are_accepted():
    model = cached_tiny("llama")
    g = grammar()
    forced = g.forced(8)
    assert tiny_tokenizer().decode(forced).startswith('{"')
    g.accept(forced[:1])  # the output moved: what is forced moves with it
    assert len(forced) > 1 and g.forced(8)[: len(forced) - 1] == forced[1:]
    out, log = run(model, prompt(7), with_drafter_grammar=True, num_draft_tokens=6)
    assert sum(a for _, a in log) >= len(forced) - 1  # the structure came from drafts


def test_a_paused_cost_gate_still_drafts_the_forced_tokens():
    """Forced tokens skip the gate's pricing: on a curve where no guess pays (a verify
    step of L tokens costs L plain ones) the gate never drafts ngram's guesses, yet the
    grammar's structure still comes from accepted drafts, and the output is plain's."""
    from specdec.policy.gate import CostGate

    model = cached_tiny("llama")
    ref, _ = run(model, prompt(7))
    steep = {L: float(L) for L in range(1, 6)}
    gate = CostGate(ChainDrafter([GrammarDrafter(), NgramDrafter(1, 3)]), steep, 4, timed=False)
    out, log = run(model, prompt(7), gate, num_draft_tokens=4)
    assert out == ref
    assert sum(a for _, a in log) >= len(grammar().forced(8)) - 1
    assert not any(gate.chosen) and gate.paused  # no guess submitted; forced drafts not counted
    assert gate.inner.stats["grammar"]["accepted"] == sum(a for _, a in log)


def test_sampled_constrained_output_always_follows_the_schema():
    model = cached_tiny("qwen2")
    for seed in range(6):
        out, _ = run(model, prompt(seed), NgramDrafter(1, 3), num_draft_tokens=4,
                     sampling=SamplingParams(temperature=1.0, seed=seed))
        value = json.loads(tiny_tokenizer().decode(out))
        assert set(value["tags"]) <= {"ab", "cd", "abcd"} and 0 <= value["n"] <= 999


@pytest.mark.slow
@requires_model("qwen2.5-coder-0.5b")
def test_json_schema_on_qwen_is_exact_and_valid():
    """Qwen2.5-Coder-0.5B under a JSON schema: the grammar,suffix chain's answer equals
    plain constrained decoding and parses; forced tokens were drafted and accepted."""
    import specdec
    from specdec.drafters import DraftSpec

    model, tok = real_model("qwen2.5-coder-0.5b")
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
              "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                             "city": {"type": "string"}}}
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    msgs = [{"role": "user", "content": "Alice Smith is 34 and lives in Lyon. Give her as JSON."}]
    ref = specdec.generate(model, tok, msgs, drafter=None, max_tokens=60, response_format=rf)
    out = specdec.generate(model, tok, msgs, drafter=DraftSpec("grammar,suffix"), max_tokens=60,
                           response_format=rf)
    assert out.tokens == ref.tokens and json.loads(out.text)["age"] == 34
    assert out.stats.accepted >= 5
