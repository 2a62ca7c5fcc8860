"""Token-exact parity, speculative vs plain greedy, on real weights (fp32, CPU).

Each plain reference is computed once per (model, prompt, max_tokens) and reused by every
speculative configuration (``conftest.plain_reference``, shared across modules). Every
parity test also asserts its runs drafted, accepted and rejected (``assert_speculated``),
and the plain path itself is checked against mlx-lm's ``generate_step`` over the full
length (greedy, and sampling with the same key sequence).
"""

import random

import mlx.core as mx
import pytest
from conftest import assert_speculated, plain_reference, real_model, requires_model
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler

from specdec.drafters import DraftSpec
from specdec.engine import generate
from specdec.core.sampling import Rng
from specdec.prompts import parity_prompts

pytestmark = pytest.mark.slow  # real models

PROMPTS = parity_prompts()
# Every SmolLM2 reference on a shared prompt here is MAX_TOKENS long, so a prompt's plain
# reference is computed once for all of them (the table, which compares its shorter runs with a
# prefix, the gated defaults, mlx-lm's own decoding, the stop string,
# tests/decode/test_tree_attention.py's trees). Each test asserts its own evidence (drafts
# accepted and rejected; the gate both drafting and decoding plain; trees with non-first
# branches taken), and it holds within 48 tokens (96 before, measured).
MAX_TOKENS = 48


def reference(name, prompt, max_tokens=MAX_TOKENS, **kw):
    return plain_reference(name, prompt, max_tokens, **kw)


def mlx_lm_tokens(name, prompt_ids, max_tokens, sampler=None):
    """mlx-lm's own decoding: ``generate_step`` with the model's own caches (mlx-lm's
    ``RotatingKVCache`` on window layers), ended at EOS as ``mlx_lm.stream_generate`` does."""
    model, tok = real_model(name)
    out = []
    for t, _ in generate_step(mx.array(prompt_ids), model, max_tokens=max_tokens, sampler=sampler):
        if int(t) in tok.eos_token_ids:
            break
        out.append(int(t))
    return out


def spec(name, prompt, max_tokens=MAX_TOKENS, drafter="ngram", **kw):
    """Speculative decoding that drafts at every step (the cost gate off), so acceptance,
    rejection and rollback are all exercised; the gate's own paths: tests/drafters/test_gate.py."""
    model, tok = real_model(name)
    n = {key: kw.pop(key) for key in ("ngram_min", "ngram_max") if key in kw}
    n.setdefault("ngram_max", max(3, n.get("ngram_min", 1)))
    draft = DraftSpec(drafter, num_draft_tokens=kw.get("num_draft_tokens", 4), gate=False, **n)
    return generate(model, tok, prompt, max_tokens=max_tokens, drafter=draft, **kw)


def random_ids_prompt(n=120, seed=0):
    rng = random.Random(seed)
    return [rng.randrange(100, 49000) for _ in range(n)]


# ---- SmolLM2 with the n-gram drafter: an all-pairs table, not the full cross product
#
# Factors, and what each can catch:
# - kind: which draft/verify paths a prompt drives. code and json quote the prompt and
#   diverge at the edit (accepted runs, then a rejection mid-block); passage recites long
#   spans (long accepted blocks, few rejections); repeat is periodic (nearly every draft
#   accepted, the bonus token after a fully accepted block); open drafts from weak matches
#   (rejections at the block's first token); ids is a token-id prompt (no chat template):
#   the model copies random_ids back (every draft accepted), random_ids_2 only in part.
# - k: the draft length: 1 (a block of two), 3 (= ngram_max), 4, 8 (long blocks), 16 (a
#   rollback of up to 16 positions).
# - n_min: the shortest n-gram that may propose (ngram_max is 3): 1 proposes on any
#   unigram match (many rejected drafts), 3 only on trigram matches.
# Every pair of two factors' values shares a row (tests/parity/test_pairwise.py checks it by
# brute force) and each row asserts the evidence measured for it, so parity is never
# vacuous. This replaces the full cross product (every parity prompt x (k, n_min) (4, 1)
# and (8, 2), and 3 prompts x k 1, 3, 16 x n_min 1, 3: 60 cases, 485 s on CI): each of its
# (kind, k), (kind, n_min) and (k, n_min) pairs is a row here. A kind runs 1 to 3 of its
# prompts: each prompt costs a plain reference (as much as a speculative run).
# A row's time is its forwards, one per step of the plain reference and of the speculative run
# (~0.2 CPU s each for SmolLM2 fp32 here, one BLAS thread; the model loads once, a prompt's
# prefill is one forward). A shared prompt's reference is TABLE_TOKENS (= MAX_TOKENS) long, as
# the other SmolLM2 tests' (table_reference_tokens); a row's speculative run decodes only its
# own length (the last column): the first of 16, 24, 32, 48 tokens at least 4 past the token where its evidence was complete
# (measured, 48-token runs: need 3..13 -> 16, 18..19 -> 24, 23..27 -> 32, 30..43 -> 48), and is
# compared with that prefix of the reference (greedy: the first n tokens do not depend on how
# many follow). A row that no longer shows its evidence in its length fails (assert_evidence),
# it never passes vacuously. 30 rows at 48 tokens: ~210 CPU s of speculative runs; the rows'
# lengths cut ~70 of them (estimated from those runs' times).
# The repeat rows are all
# repetitive_words: repetitive_counting's answer starts to count late (at 48 tokens its k 4 and
# 16 drafted nothing, k 1 accepted nothing), so its rows decoded 96 tokens and a 96-token
# reference of their own (68 CPU s); repetitive_words at 48 tokens shows each of those rows'
# evidence (drafted, accepted, steps with a rejection: k1 n1 15/3/12, k4 n3 4/2/1, k16 n2
# 17/3/2; measured) on the reference its other rows share (29 CPU s).
TABLE_TOKENS = MAX_TOKENS
LEVELS = {"kind": ("code", "json", "passage", "repeat", "open", "ids"), "k": (1, 3, 4, 8, 16),
          "n_min": (1, 2, 3)}
# (kind, prompt, k, n_min, evidence, tokens); n_min = (kind index + k index) % 3 + 1 but in
# open k 16
PARITY_CASES = [
    ("code", "demo_colorsys", 1, 1, "speculated", 16),
    ("code", "code_statistics_hints", 3, 2, "speculated", 16),
    ("code", "code_textwrap_doc", 4, 3, "speculated", 24),
    ("code", "code_statistics_hints", 8, 1, "speculated", 16),
    ("code", "demo_colorsys", 16, 2, "speculated", 24),
    ("json", "json_add_record", 1, 2, "speculated", 32),
    ("json", "json_records", 3, 3, "speculated", 32),
    ("json", "json_add_record", 4, 1, "speculated", 24),
    ("json", "json_add_record", 8, 2, "speculated", 32),
    ("json", "json_records", 16, 3, "speculated", 32),
    ("passage", "passage_zen", 1, 3, "accepted", 16),  # recited verbatim: may never reject
    ("passage", "passage_argparse", 3, 1, "speculated", 16),
    ("passage", "passage_argparse", 4, 2, "speculated", 16),
    ("passage", "passage_string", 8, 3, "speculated", 16),  # argparse: 32 drafts, none accepted
    ("passage", "passage_zen", 16, 1, "accepted", 16),
    ("repeat", "repetitive_words", 1, 1, "speculated", 48),
    ("repeat", "repetitive_words", 3, 2, "speculated", 48),
    ("repeat", "repetitive_words", 4, 3, "speculated", 48),
    ("repeat", "repetitive_words", 8, 1, "speculated", 48),
    ("repeat", "repetitive_words", 16, 2, "speculated", 48),
    ("open", "open_story", 1, 2, "speculated", 48),
    ("open", "open_arith", 3, 3, "speculated", 32),
    ("open", "open_story", 4, 1, "speculated", 32),
    ("open", "open_arith", 8, 2, "speculated", 16),
    ("open", "open_story", 16, 1, "speculated", 32),  # n_min 3: 5 drafts, none accepted
    ("ids", "random_ids", 1, 3, "all accepted", 16),
    ("ids", "random_ids_2", 3, 1, "speculated", 32),
    ("ids", "random_ids", 4, 2, "all accepted", 16),
    ("ids", "random_ids_2", 8, 3, "speculated", 48),
    ("ids", "random_ids", 16, 1, "all accepted", 16),
]
VARIED = {**PROMPTS, "random_ids": random_ids_prompt(), "random_ids_2": random_ids_prompt(60, 1)}
# The prompts whose TABLE_TOKENS reference other tests share (the gated defaults, mlx-lm's plain
# run, the stop string here; tests/bench/test_oracle, tests/decode/test_tree_attention,
# tests/drafters/test_suffix, test_ngram_mod, test_draft_model): their rows cut that one. Every
# other prompt's reference is only as long as its longest row (greedy: a prefix is the shorter
# run), e.g. passage_argparse's 16, not 48: ~0.2 CPU s a plain step saved, 144 steps in all.
SHARED_REFERENCES = {"demo_colorsys", "code_statistics_hints", "code_textwrap_doc", "passage_zen",
                     "repetitive_words", "open_story"}


def table_reference_tokens(name):
    """The length of ``name``'s plain reference in the table (see SHARED_REFERENCES)."""
    if name in SHARED_REFERENCES:
        return TABLE_TOKENS
    return max(row[5] for row in PARITY_CASES if row[1] == name)


def assert_evidence(out, evidence, what):
    """The evidence a row's run must show: "speculated" drafts both accepted and rejected,
    "all accepted" every draft accepted, "accepted" some accepted (a recitation)."""
    if evidence == "speculated":
        assert_speculated(out.steps, what=what)
    elif evidence == "all accepted":
        assert 0 < out.stats.accepted == out.stats.drafted, (what, out.stats)
    else:
        assert evidence == "accepted", evidence
        assert 0 < out.stats.accepted <= out.stats.drafted, (what, out.stats)


def detokenized(name, tokens):
    """The text a plain run that emitted ``tokens`` returns: the model's streaming
    detokenizer fed them and finalized (what the engine's ``TextOut`` does, with no stop)."""
    _, tok = real_model(name)
    detok = tok.detokenizer
    detok.reset()
    for t in tokens:
        detok.add_token(t)
    detok.finalize()
    return detok.text


@pytest.mark.parametrize("kind,name,k,n_min,evidence,tokens", PARITY_CASES,
                         ids=[f"{c[1]}-k{c[2]}-n{c[3]}" for c in PARITY_CASES])
def test_smollm_ngram_parity(kind, name, k, n_min, evidence, tokens):
    prompt = VARIED[name]
    want = reference("smollm2-135m", prompt, table_reference_tokens(name)).tokens[:tokens]
    out = spec("smollm2-135m", prompt, tokens, drafter="ngram", num_draft_tokens=k, ngram_min=n_min,
               ngram_max=max(3, n_min))
    assert out.tokens == want
    assert out.text == detokenized("smollm2-135m", want)
    assert_evidence(out, evidence, f"{name} k={k} n_min={n_min} over {tokens} tokens")


def test_smollm_default_gated_parity():
    """The defaults (suffix up to k = 8 under the cost gate): identical tokens, and across
    a quoting, an open-ended and a reciting prompt it both drafts and decodes plain."""
    model, tok = real_model("smollm2-135m")
    drafted = plain = 0
    for name in ("demo_colorsys", "open_story", "passage_zen"):
        out = generate(model, tok, PROMPTS[name], max_tokens=MAX_TOKENS)
        assert out.tokens == reference("smollm2-135m", PROMPTS[name]).tokens, name
        drafted += out.stats.draft_steps
        plain += out.stats.verify_steps - out.stats.draft_steps
    assert drafted > 0 and plain > 0, (drafted, plain)


def test_plain_engine_equals_mlx_lm_generate():
    """Our plain path is mlx-lm's plain decoding: same tokens as mlx_lm.generate_step,
    compared over the full length (a run ended early by EOS must end at the same token).
    One prompt: open_story was a second case on the same greedy path (7 CPU s); it is
    compared with mlx-lm under sampling below, Gemma and Qwen greedily further down."""
    ref = reference("smollm2-135m", PROMPTS["demo_colorsys"])
    assert ref.tokens == mlx_lm_tokens("smollm2-135m", ref.prompt_tokens, MAX_TOKENS)


# (seed, params): each filter once, both seeds. A seed only picks the key chain (whose
# premise, mx.random.seed(s) == Rng(s), is asserted for each seed); a filter's code path is
# the same under any key, so the 3 x 2 cross product drove each path twice with nothing new.
SAMPLING = [(0, dict(temperature=0.8)), (7, dict(temperature=1.0, top_p=0.9, top_k=40)),
            (7, dict(temperature=0.7, min_p=0.05))]
# each sampled run's length: a key per token, so 24 tokens compare 24 draws of each filter's
# path (48 before: 13 CPU s a case, our run and mlx-lm's; 24 leave them past the greedy prefix
# at their first or second token, measured)
SAMPLE_TOKENS = 24


def mlx_lm_keyed_sampler(seed, **params):
    """mlx-lm's own sampler (``make_sampler``: its filters, its temperature, its
    ``categorical_sampling``), driven by the key sequence our ``Rng(seed)`` produces.

    Why this is an independent reference: ``categorical_sampling`` draws from mlx's global
    key stream, and ``mx.random.seed(seed)`` starts that stream at ``key(seed)`` and splits
    it once per draw: the chain ``Rng`` produces (asserted in the test, so a change in mlx
    shows up as a failed premise, not as a parity failure). Only the keys are shared: the
    filtering, temperature and draw are mlx-lm's code, ours (``processed_probs`` +
    ``categorical`` on log-probabilities) is not run. A draw's noise depends on the shape
    of the logits; our engine draws on one row (V,), ``generate_step`` hands the sampler a
    batch of one (1, V), so the row is unwrapped for the draw and rewrapped after.
    """
    sampler = make_sampler(temp=params.get("temperature", 0.0), top_p=params.get("top_p", 0.0),
                           min_p=params.get("min_p", 0.0), top_k=params.get("top_k", 0))
    mx.random.seed(seed)
    return lambda logprobs: sampler(logprobs[0])[None]


@pytest.mark.slow
@pytest.mark.parametrize("seed,params", SAMPLING,
                         ids=[f"{s}-" + "-".join(f"{k}{v}" for k, v in p.items()) for s, p in SAMPLING])
def test_plain_sampling_equals_mlx_lm_sampler_with_the_same_keys(seed, params):
    # The premise: mx.random.seed(s) then global draws == draws with Rng(s) keys, in order.
    rng, x = Rng(seed), mx.arange(10.0)
    mine = [mx.random.categorical(x, key=rng.next()).item() for _ in range(4)]
    mx.random.seed(seed)
    assert mine == [mx.random.categorical(x).item() for _ in range(4)]

    prompt = PROMPTS["open_story"]
    ours = reference("smollm2-135m", prompt, SAMPLE_TOKENS, seed=seed, **params)
    assert len(ours.tokens) > 16
    theirs = mlx_lm_tokens("smollm2-135m", ours.prompt_tokens, SAMPLE_TOKENS,
                           mlx_lm_keyed_sampler(seed, **params))
    assert ours.tokens == theirs
    greedy = reference("smollm2-135m", prompt)  # the table's open_story reference
    assert ours.tokens != greedy.tokens[: len(ours.tokens)]  # it really sampled


# the periodic and random-token tests' own references (no other test shares their prompts):
# their evidence holds within 24 tokens (measured: 3 verify steps for 24 periodic tokens; the
# random ids' first rejecting step ends at token 12, acceptance 0.27), 48 cost 9 more CPU s
OWN_TOKENS = 24


def test_periodic_text_needs_few_verify_steps(smollm):
    prompt = "1 2 3 4 5 6 7 8 " * 12
    out = spec("smollm2-135m", prompt, OWN_TOKENS, drafter="ngram", num_draft_tokens=8, chat=False)
    assert out.tokens == reference("smollm2-135m", prompt, OWN_TOKENS, chat=False).tokens
    assert out.stats.verify_steps * 3 < len(out.tokens)  # >3 tokens per target forward
    # every draft is right here (measured: 21 of 21), so this proves acceptance only; the
    # random-token test below proves rejection on the same model
    assert out.stats.drafted > 0 and out.stats.accepted == out.stats.drafted


def test_random_tokens_verify_every_token_and_keep_output(smollm):
    prompt = random_ids_prompt(200, seed=5)
    ref = reference("smollm2-135m", prompt, OWN_TOKENS)
    out = spec("smollm2-135m", prompt, OWN_TOKENS, drafter="ngram", num_draft_tokens=4, ngram_min=3)
    assert out.tokens == ref.tokens
    assert out.stats.verify_steps == len(out.tokens) - out.stats.accepted
    assert out.stats.acceptance_rate < 0.5
    assert_speculated(out.steps, what="random ids")


def test_stop_string_inside_an_accepted_block(smollm):
    prompt = PROMPTS["demo_colorsys"]
    ref = reference("smollm2-135m", prompt)
    stop = ref.text[len(ref.text) // 2 : len(ref.text) // 2 + 6]
    out = spec("smollm2-135m", prompt, drafter="ngram", num_draft_tokens=8, stop=[stop])
    assert out.text == ref.text[: ref.text.index(stop)]
    assert out.finish_reason == "stop"
    assert out.tokens == ref.tokens[: len(out.tokens)]
    assert len(out.text) < len(ref.text)  # the stop string really ended it
    assert_speculated(out.steps, what="stop string")


# ---- Gemma 3 270M: 512-token sliding window, crossed so rotation and rollback interleave


def gemma_prompt():
    """Real code twice, the second copy with renamed identifiers, then most of the first
    again (490 tokens): the drafter's most recent match often proposes the wrong variant,
    and the output runs off the quoted code right after it crosses the 512-token window
    (at 523..529), so drafts are accepted and rejected on both sides of the wrap within
    GEMMA_TOKENS (measured). The third copy was src[:40] (393 tokens), whose first
    rejection past the wrap came at token 128: 160 tokens a decode, 60 CPU s each."""
    from specdec.prompts import source_of

    src = source_of("textwrap", "TextWrapper")[:760]
    variant = src.replace("self", "this").replace("text", "words")
    return f"```python\n{src}\n```\n```python\n{variant}\n```\n```python\n{src[:560]}"


# gemma_prompt's decode length: 22 tokens before the wrap, 34 past it
GEMMA_TOKENS = 56


needs_gemma = requires_model("gemma3-270m")


def rejection_positions(result):
    """Sequence positions (prompt + generated, 0-based) where a draft token was rejected."""
    pos, out = len(result.prompt_tokens), []
    for n, accepted in result.steps:
        if accepted < n - 1:
            out.append(pos + accepted)  # the first rejected draft token's slot
        pos += accepted + 1
    return out


WINDOW = 512


# every config's drafts are rejected after the window wrapped (measured: at 523..529), a
# window cache's rollback past a dropped position at k 4, 8, 16. k=1 n_min=1 and k=2 n_min=2
# were cases too (41 s on CI) when they rejected only before the wrap: a window cache's
# rollback before it wraps is tests/test_engine.py's gemma3 grid at every k 1..16 (an 8-token
# window, crossed and rolled back constantly) and the SmolLM2 rows' at every k on full caches.


@needs_gemma
@pytest.mark.parametrize("k,n_min", [(4, 1), (8, 3), (16, 2)])
def test_gemma_parity_across_the_sliding_window(k, n_min):
    prompt = gemma_prompt()
    ref = reference("gemma3-270m", prompt, max_tokens=GEMMA_TOKENS)
    assert len(ref.prompt_tokens) < WINDOW < len(ref.prompt_tokens) + len(ref.tokens)
    out = spec("gemma3-270m", prompt, max_tokens=GEMMA_TOKENS, drafter="ngram", num_draft_tokens=k,
               ngram_min=n_min)
    assert out.tokens == ref.tokens
    assert_speculated(out.steps, what=f"gemma k={k} n_min={n_min}")
    # a rollback after the window wrapped: the window cache trims past a dropped position
    assert max(rejection_positions(out)) > WINDOW, rejection_positions(out)


@needs_gemma
def test_gemma_plain_engine_equals_mlx_lm_rotating_cache():
    """Across the window our time-ordered window cache reproduces mlx-lm's own output."""
    ref = reference("gemma3-270m", gemma_prompt(), max_tokens=GEMMA_TOKENS)
    assert len(ref.prompt_tokens) < WINDOW < len(ref.prompt_tokens) + len(ref.tokens)
    assert ref.tokens == mlx_lm_tokens("gemma3-270m", ref.prompt_tokens, GEMMA_TOKENS)


needs_qwen = requires_model("qwen2.5-coder-0.5b")
QWEN_PROMPT = PROMPTS["code_textwrap_doc"]
# Qwen's decode length, here and in tests/decode/test_tree_attention.py's Qwen trees (one
# shared reference): k 4 rejects at its first step and accepts the next four (token 6), an
# n-gram tree verifies 11 nodes at depth 4 by token 20 (measured). 64 before: two plain
# 64-token decodes (ours and mlx-lm's) of a 0.5B model, ~25 CPU s more.
QWEN_TOKENS = 24


@needs_qwen
def test_qwen_coder_parity():
    ref = reference("qwen2.5-coder-0.5b", QWEN_PROMPT, max_tokens=QWEN_TOKENS)
    out = spec("qwen2.5-coder-0.5b", QWEN_PROMPT, max_tokens=QWEN_TOKENS, drafter="ngram", num_draft_tokens=4)
    assert out.tokens == ref.tokens
    assert_speculated(out.steps, what="qwen")


@needs_qwen
def test_qwen_plain_engine_equals_mlx_lm_generate():
    ref = reference("qwen2.5-coder-0.5b", QWEN_PROMPT, max_tokens=QWEN_TOKENS)
    assert ref.tokens == mlx_lm_tokens("qwen2.5-coder-0.5b", ref.prompt_tokens, QWEN_TOKENS)
