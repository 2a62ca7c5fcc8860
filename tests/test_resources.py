"""``specdec.resources.prepare_resources``: only what the spec uses is prepared, and what
the caller hands in is used as given (nothing measured or loaded here: the gate is off)."""

from __future__ import annotations

from conftest import cached_tiny

from specdec.drafters.spec import DraftSpec
from specdec.resources import prepare_resources


def test_a_spec_without_a_model_or_table_prepares_nothing():
    tok = object()  # stands for a tokenizer: nothing here reads it
    res = prepare_resources(DraftSpec("ngram", gate=False), cached_tiny("llama"), tok)
    assert res.tokenizer is tok
    assert (res.draft, res.table, res.cost, res.draft_cost, res.target) == (None,) * 5


def test_what_the_caller_hands_in_is_used_as_given():
    draft, table = (cached_tiny("llama", seed=1), None), object()
    spec = DraftSpec("model,ngram-mod", draft_model="elsewhere", gate=False)
    res = prepare_resources(spec, cached_tiny("llama"), None, draft=draft, table=table)
    assert res.draft is draft and res.table is table and res.cost is None


class _Wrapped:
    """A tokenizer held as mlx-lm's ``TokenizerWrapper`` holds it, counting vocabulary reads."""

    def __init__(self, tokenizer):
        self._tokenizer, self.reads = tokenizer, 0

    def get_vocab(self):
        self.reads += 1
        return self._tokenizer.get_vocab()


def test_library_calls_find_their_ngram_mod_table_hashing_the_vocabulary_once():
    """``resources_for`` looks the process-wide ngram-mod table up by the tokenizer's
    fingerprint at every library call: the vocabulary is hashed once per tokenizer (each
    call hashed it: ~0.3 CPU s on SmolLM2, ~1 s on Qwen; a server start did four), and once
    more after a token is added (another vocabulary: another table)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from specdec.resources import resources_for

    tok = _Wrapped(Tokenizer(WordLevel({"fingerprint": 0, "once": 1, "[UNK]": 2}, unk_token="[UNK]")))
    spec = DraftSpec("ngram-mod", gate=False)
    first = resources_for(spec, None, tok).table
    assert resources_for(spec, None, tok).table is first and tok.reads == 1
    tok._tokenizer.add_tokens(["added"])
    assert resources_for(spec, None, tok).table is not first and tok.reads == 2
