"""Constrained decoding (JSON schemas, JSON objects, Lark grammars) with llguidance, exact
under speculation.

Contract: ``response_grammar(response_format)`` -> an llguidance grammar or None (ValueError
saying what to fix). ``Grammar`` is one request's constraint: as a ``stateful`` logits
processor it masks each verified position to what the grammar allows after that position's
own history and rolls back to the output; ``accept(tokens)`` advances it; ``forced(k)`` is
what the grammar alone allows (free drafts). Plain decoding applies the same mask, so output
is unchanged. Tests: tests/core/test_grammar.py, tests/drafters/test_grammar.py,
tests/toolcall/test_formats.py.
Why llguidance (measured): docs/agents-and-structured-output.md#grammars."""

from __future__ import annotations

from typing import Any, Sequence

import llguidance
import mlx.core as mx
import numpy as np

from .processors import LogitsProcessor

JSON_STYLE = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
_TOKENIZERS: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, LLTokenizer)


def response_grammar(response_format: dict | None) -> str | None:
    """The llguidance grammar of an OpenAI ``response_format`` (None: unconstrained).

    >>> response_grammar({"type": "text"}) is None
    True
    >>> "x-guidance" in response_grammar({"type": "json_object"})
    True
    """
    if not response_format or response_format.get("type") == "text":
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        schema: Any = {"type": "object"}
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), (dict, bool)):
            raise ValueError("response_format json_schema needs {'json_schema': {'name': ..., "
                             "'schema': {...}}}")
        schema = spec.get("schema", {})
    else:
        raise ValueError(f"response_format type {kind!r}: use 'text', 'json_object' or 'json_schema'")
    schema = {"x-guidance": JSON_STYLE, **schema} if isinstance(schema, dict) else schema
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if failed:
        raise ValueError(f"response_format schema is not supported: {'; '.join(messages)}")
    return grammar


def lark_grammar(text: str) -> str:
    """An llguidance grammar from Lark source."""
    return llguidance.LLMatcher.grammar_from_lark(text)


def ll_tokenizer(tokenizer: Any, vocab: int) -> Any:
    """The llguidance tokenizer of an mlx-lm tokenizer (built once: ~1-3 s)."""
    hit = _TOKENIZERS.get(id(tokenizer))
    if hit is None or hit[0] is not tokenizer or hit[1].vocab_size != vocab:
        llt = llguidance.LLTokenizer(tokenizer.backend_tokenizer.to_str(), n_vocab=vocab,
                                     eos_token=sorted(tokenizer.eos_token_ids))
        _TOKENIZERS[id(tokenizer)] = hit = (tokenizer, llt)
    return hit[1]


class Grammar(LogitsProcessor):
    """One request's constraint: masks each verified position to what the grammar allows
    there, ``accept(tokens)`` advances it, ``forced(k)`` is what it alone allows."""

    stateful = True

    def __init__(self, tokenizer: Any, grammar: str, vocab: int):
        self.vocab, self.ll_tokenizer = vocab, ll_tokenizer(tokenizer, vocab)
        self.matcher = llguidance.LLMatcher(self.ll_tokenizer, grammar)
        if self.matcher.is_error():
            raise ValueError(f"grammar: {self.matcher.get_error()}")
        self.words = (vocab + 31) // 32
        # the forced tokens at the current output: asked several times a step (the cost
        # gate, then the chain's grammar drafter, a shadow guess); only ``accept`` moves it
        self._ff: list[int] | None = None

    def _fill(self, out: np.ndarray, row: int) -> None:
        self.matcher.unsafe_compute_mask_ptr(out[row].ctypes.data, self.words * 4)

    def masks(self, seen: Sequence[Sequence[int]]) -> np.ndarray:
        """(rows, words) int32 bitmasks: row r allows what follows the output + ``seen[r]``;
        a row behind a draft token the grammar forbids allows everything (it is never
        reached: that token has probability 0). The matcher ends where it began."""
        out = np.full((len(seen), self.words), -1, dtype=np.int32)
        stack: list[int] = []  # tokens consumed beyond the output
        for r, path in enumerate(seen):
            common = 0
            while common < min(len(stack), len(path)) and stack[common] == path[common]:
                common += 1
            if len(stack) > common:
                self.matcher.rollback(len(stack) - common)
                del stack[common:]
            rest = list(path[common:])
            if self.matcher.validate_tokens(rest) < len(rest):
                continue  # unreachable row
            for t in rest:
                self.matcher.consume_token(t)
            stack += rest
            self._fill(out, r)
        if stack:
            self.matcher.rollback(len(stack))
        return out

    def __call__(self, logits, context, seen):
        bits = np.unpackbits(self.masks(seen).view(np.uint8), axis=1, bitorder="little")
        allowed = mx.array(bits[:, : logits.shape[-1]].astype(np.bool_))
        return mx.where(allowed, logits, mx.array(-float("inf"), dtype=logits.dtype))

    def accept(self, tokens: Sequence[int]) -> None:
        self._ff = None
        for t in tokens:
            if self.matcher.is_stopped():
                return  # the grammar ended (EOS): what follows is not output
            if not self.matcher.consume_token(t):
                raise RuntimeError(f"grammar: emitted token {t} was not allowed "
                                   f"({self.matcher.get_error()})")

    def forced(self, k: int) -> list[int]:
        """Up to ``k`` next tokens the grammar allows alone."""
        if k < 1 or self.matcher.is_stopped():
            return []
        if self._ff is None:
            self._ff = list(self.matcher.compute_ff_tokens())
        return self._ff[:k]
