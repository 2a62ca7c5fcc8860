"""WeDLM parallel decoding (lossy) on an unmodified mlx-lm model.

Each step runs one forward over a window of W slots after the committed prefix (filled
tokens first, masks after, each at its logical RoPE position), commits the leading run of
filled slots, fills the confident masks (entropy + position penalty below the threshold,
at least one) and slides the window; greedy, or sampled at a temperature with one key
of the request's seeded ``Rng`` per step (entropies unscaled). Invariant: after every
step the cache equals a causal prefill of prompt + committed. NOT lossless; the lossless
use of the same forward is ``specdec.drafters.wedlm``. Full algorithm: docs/wedlm.md#the-lossy-decoder.
Tests: tests/decode/test_wedlm.py, tests/core/test_wedlm.py.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generator, Iterator, Sequence, cast

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from ..core.arrays import ints
from ..core.model import Model
from ..core.sampling import Rng
from ..core.text import TextOut, encode_prompt
from ..core.wedlm import WedlmSettings, pick
from .tree_attention import TreeRoPE, rope_owners

@dataclass
class WedlmStats:
    """Counts of one generation: tokens committed, forwards run (and the window tokens they
    processed, for the paper's p_cache = generated / forwarded), steps that committed."""

    tokens: int = 0
    forwards: int = 0
    forwarded_tokens: int = 0
    commit_steps: int = 0
    host_syncs: int = 0
    commits: list[int] = field(default_factory=list)  # tokens committed per step

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "forwards": self.forwards,
                "tokens_per_forward": round(self.tokens_per_forward, 3),
                "commits_per_step": round(self.tokens / max(1, len(self.commits)), 3),
                "p_cache": round(self.tokens / max(1, self.forwarded_tokens), 3),
                "lossless": False}


@contextmanager
def positions(model: nn.Module, rel: Sequence[int]) -> Iterator[None]:
    """Within the block, token ``i`` is rotated at ``cache offset + rel[i]`` (attention stays
    causal in the order given). Restores the model's RoPE modules on exit."""
    owners = rope_owners(model)
    inner = [m["rope"] for m in owners]
    depths = mx.array(list(rel), dtype=mx.int32)
    try:
        for m, r in zip(owners, inner):
            m.rope = TreeRoPE(r, depths)
        yield
    finally:
        for m, r in zip(owners, inner):
            m.rope = r


def reordered_logits(model: nn.Module, cache: list, tokens: Sequence[int],
                     rel: Sequence[int]) -> mx.array:
    """Logits (L, V) of ``tokens`` at logical positions ``offset + rel`` on top of ``cache``
    (which then holds them in the order given)."""
    with positions(model, rel):
        out = model(mx.array(list(tokens))[None], cache=cache)
    return out[0]


@dataclass
class _Window:
    tokens: list[int]
    masked: list[bool]

    def order(self) -> list[int]:
        filled = [i for i, m in enumerate(self.masked) if not m]
        return filled + [i for i, m in enumerate(self.masked) if m]

    def leading(self) -> int:
        return next((i for i, m in enumerate(self.masked) if m), len(self.masked))


def _step(model: Model, cache: list, win: _Window, s: WedlmSettings, stats: WedlmStats,
          temperature: float = 0.0, rng: Rng | None = None) -> list[int]:
    """One forward: the leading filled run is forwarded with fresh masks refilling the
    window behind it (as Tencent's engine does), then committed while the rest is trimmed
    from the cache; confident masks are filled. Returns the committed tokens."""
    c = win.leading()
    win.tokens += [s.mask_token_id] * c  # the window keeps W slots after the committed run
    win.masked += [True] * c
    order = win.order()
    n_filled = sum(1 for m in win.masked if not m)
    logits = reordered_logits(cast("nn.Module", model), cache, [win.tokens[i] for i in order], order)
    stats.forwards += 1
    stats.forwarded_tokens += len(order)
    committed = win.tokens[:c]
    trim_prompt_cache(cache, len(order) - c)  # the run is physically first: keep only it
    masks = order[n_filled:]  # never empty: slot c is a mask by the choice of c
    if temperature > 0 and rng is None:
        raise ValueError("sampling (temperature > 0) draws with an Rng: pass one")
    key = rng.next() if temperature > 0 and rng is not None else None
    tok, fill = pick(logits[n_filled:], [i - masks[0] for i in masks], s, temperature, key)
    mx.eval(tok, fill)
    stats.host_syncs += 1
    for i, t, f in zip(masks, ints(tok), ints(fill)):
        if f:
            win.tokens[i], win.masked[i] = int(t), False
    del win.tokens[:c], win.masked[:c]
    return committed


def step_stream(model: Model, prompt_ids: Sequence[int], settings: WedlmSettings, *,
                max_tokens: int = 256, eos: Sequence[int] = (),
                stats: WedlmStats | None = None, cache: list | None = None,
                temperature: float = 0.0, rng: Rng | None = None) -> Generator[list[int], None, None]:
    """Yields each step's committed tokens (cut before EOS and at ``max_tokens``; a step
    may commit none) until EOS or ``max_tokens``. ``cache`` (a fresh ``make_prompt_cache``)
    may be passed in to inspect it; it then holds the prompt and the committed tokens (plus
    up to one step's commits past a stop). ``temperature`` > 0 draws each mask's token with
    one key of ``rng`` per step (unseeded when None). The server streams step by step."""
    if not prompt_ids:
        raise ValueError("wedlm decoding needs a non-empty prompt")
    if temperature > 0 and rng is None:
        rng = Rng(None)
    stats = stats if stats is not None else WedlmStats()
    cache = cache if cache is not None else make_prompt_cache(cast("nn.Module", model))
    mx.eval(model(mx.array(list(prompt_ids))[None], cache=cache))
    win = _Window([settings.mask_token_id] * settings.window, [True] * settings.window)
    stop, emitted = set(int(e) for e in eos), 0
    while emitted < max_tokens:
        committed = _step(model, cache, win, settings, stats, temperature, rng)
        if committed:
            stats.commit_steps += 1
        stats.commits.append(len(committed))
        cut = next((i for i, t in enumerate(committed) if t in stop), None)
        out = committed[:cut][:max_tokens - emitted]
        stats.tokens += len(out)
        emitted += len(out)
        yield out
        if cut is not None:
            return


def wedlm_stream(model: Model, prompt_ids: Sequence[int], settings: WedlmSettings, *,
                 max_tokens: int = 256, eos: Sequence[int] = (),
                 stats: WedlmStats | None = None, cache: list | None = None,
                 temperature: float = 0.0, rng: Rng | None = None) -> Iterator[int]:
    """``step_stream``'s tokens one by one (EOS not yielded)."""
    for committed in step_stream(model, prompt_ids, settings, max_tokens=max_tokens, eos=eos,
                                 stats=stats, cache=cache, temperature=temperature, rng=rng):
        yield from committed


@dataclass(frozen=True)
class WedlmResult:
    """One lossy WeDLM generation: its text, tokens, why it ended, stats and decode time."""

    text: str
    tokens: list[int]
    finish_reason: str
    stats: WedlmStats
    decode_s: float

    def to_dict(self) -> dict[str, Any]:
        tps = len(self.tokens) / self.decode_s if self.decode_s > 0 else 0.0
        return {"text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason,
                "decoder": "wedlm", "tokens_per_s": tps, **self.stats.as_dict()}


def generate_wedlm(model: Model, tokenizer: Any, prompt: Any, settings: WedlmSettings, *,
                   max_tokens: int = 256, stop: Sequence[str] | None = None,
                   system: str | None = None, chat: bool | None = None,
                   temperature: float = 0.0, seed: int | None = None) -> WedlmResult:
    """Lossy WeDLM decoding of ``prompt`` (text, ids or chat messages), cut at EOS, a
    stop string or ``max_tokens``; greedy, or sampled at ``temperature`` (reproducible with
    ``seed``). Not lossless: see the module doc."""
    ids = encode_prompt(tokenizer, prompt, system=system, chat=chat)
    out, stats, text, tokens = TextOut(tokenizer, stop), WedlmStats(), [], []
    stopped = False
    t0 = time.perf_counter()
    rng = Rng(seed) if temperature > 0 else None
    for t in wedlm_stream(model, ids, settings, max_tokens=max_tokens,
                          eos=tokenizer.eos_token_ids, stats=stats, temperature=temperature, rng=rng):
        tokens.append(t)
        segment, stopped = out.feed(t)
        text.append(segment)
        if stopped:  # a stop string: the text is cut there, nothing held back is kept
            break
    seconds = time.perf_counter() - t0
    if not stopped:
        text.append(out.tail())
    reason = "length" if len(tokens) >= max_tokens and not stopped else "stop"
    return WedlmResult("".join(text), tokens, reason, stats, seconds)
