"""One request's lifecycle, the same for the library (``engine``) and the server's batcher.

Contract of ``Request(model, prompt_ids, ...)`` (arguments validated at construction):
- ``start()``: the cache — a ``PromptCache`` given as ``prompt_cache`` keeps the longest
  prefix it shares with the prompt (``reuse``), else a fresh ``rollback.make_cache`` —,
  the stats, the drafter's ``constrain`` (the request's grammar among ``processors``, or
  None) and ``begin`` (inside the prefill phase, so a draft model's prompt
  pass counts as prefill) and the prompt tokens still to feed (all but the last: the
  first decode step feeds it).
- ``adopt(cache)``, between ``start`` and the first ``prefill``: a prompt cache sharing
  more of the prompt replaces the request's own (returned), and less is left to feed.
- ``prefill(chunk=None)`` feeds up to ``chunk`` of them (None: all) and returns True once
  none are left; ``row()`` is then the request's ``batch.Row`` and ``layers`` its cache.
  ``prefill_together(model, requests)`` instead feeds several started requests' prompts
  in one batched forward (``batch_cache.prefill_rows``) and returns the batch cache
  (``batch.Batch.join_rows``): each request's row starts from its ``layers`` (a reused
  prefix included), which it gets back, holding its row, when it leaves the batch
  (``finish(ok, layers)``).
- ``feed(step)`` turns one ``step.Step`` into ``Emitted`` tokens: the step is recorded in
  the stats (and ``step_log``); EOS ends the output (not emitted), as do ``max_tokens``
  and, with a ``TextOut`` (``text``), a stop string, so a stop inside an accepted block
  ends the output there. ``finish_reason`` is then "stop" or "length"; ``tail()`` is the
  text the detokenizer still held (none after a stop string).
- ``finish(ok, layers=None)``: a prompt cache then holds exactly the prompt and the
  emitted tokens (``settle``); after an error (``ok`` False) its contents are unknown, so
  it is emptied. ``layers``: the request's cache as a batch handed it back on leaving.
- ``run()`` is the single-stream driver: start, prefill, then a batch of one (speculative:
  ``batch.Batch``, whose step is ``step.verify_step``) or pipelined plain decoding
  (``plain.plain_steps``), yielding each emitted token, settling on the way out (finished,
  closed early, or failed). While the drafter is ``paused`` (the cost gate found that
  drafting does not pay) a speculative request decodes plain and pipelined too, telling
  the drafter each token (``watch``) and each step's time (``step_time``), and goes back to
  verify steps when it resumes; it cannot where a logits processor needs the host between
  tokens (a grammar), and then takes one-token verify steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..cache.batch_cache import RowsKVCache, prefill_rows
from ..cache.prompt_cache import PromptCache
from ..cache.recurrent import RecurrentCache
from ..cache.rollback import make_cache, prefill
from ..core.grammar import Grammar
from ..core.processors import LogitsProcessor, processors_for
from ..core.sampling import Rng, SamplingParams
from ..core.stats import SpecStats
from ..core.text import TextOut
from ..drafters.base import Drafter, NoDrafter
from ..policy.tree_shape import TreeShaper
from .batch import Batch, Row
from .plain import plain_steps
from .step import SeededSampler, Step


@dataclass
class Emitted:
    token: int
    from_draft: bool
    margin: float | None
    logprob: float
    top: list[tuple[int, float]] | None = None
    text: str = ""  # the text this token completes (with a TextOut)


def check_args(max_tokens: int, num_draft_tokens: int, prefill_step_size: int,
               top_logprobs: int) -> None:
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if num_draft_tokens < 1:
        raise ValueError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
    if prefill_step_size < 1:
        raise ValueError(f"prefill_step_size must be >= 1, got {prefill_step_size}")
    if not 0 <= top_logprobs <= 100:
        raise ValueError(f"top_logprobs must be in [0, 100], got {top_logprobs}")


class Request:
    """See the module docstring."""

    def __init__(self, model: Any, prompt_ids: Sequence[int], *, drafter: Drafter | None = None,
                 max_tokens: int = 256, num_draft_tokens: int = 4, eos: Sequence[int] | set[int] = (),
                 sampling: SamplingParams = SamplingParams(), tree_budget: int = 0,
                 shaper: TreeShaper | None = None, prompt_cache: PromptCache | None = None,
                 kv_bits: int | None = None, kv_group_size: int = 64, prefill_step_size: int = 512,
                 diagnostics: bool = False, top_logprobs: int = 0, stats: SpecStats | None = None,
                 step_log: list[tuple[int, int]] | None = None, text: TextOut | None = None,
                 processors: Sequence[LogitsProcessor] = ()):
        check_args(max_tokens, num_draft_tokens, prefill_step_size, top_logprobs)
        if not prompt_ids:
            raise ValueError("the prompt encodes to no tokens")
        if tree_budget and not getattr(model, "verifies_trees", True):
            raise ValueError("token trees (--draft-tree-budget) do not work on a sharded target "
                             "(--distributed) yet: use linear drafts (--draft-tree-budget 0)")
        self.model, self.prompt_ids = model, list(prompt_ids)
        self.drafter = drafter or NoDrafter()
        self.sampling = sampling.validate()
        self.max_tokens, self.k, self.eos = max_tokens, num_draft_tokens, set(eos)
        self.tree_budget, self.shaper = tree_budget, shaper
        self.prompt_cache, self.kv_bits, self.kv_group_size = prompt_cache, kv_bits, kv_group_size
        self.prefill_step_size, self.diagnostics, self.top_logprobs = prefill_step_size, diagnostics, top_logprobs
        self.stats = stats if stats is not None else SpecStats()
        self.step_log, self.text, self.processors = step_log, text, list(processors)
        self.budget = [max_tokens]  # tokens still wanted: drafting stops there
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.stopped = False  # by a stop string
        self._cache: list[Any] | None = None
        self._row: Row | None = None

    @property
    def speculative(self) -> bool:
        return not isinstance(self.drafter, NoDrafter)

    @property
    def layers(self) -> list[Any]:
        return self.prompt_cache.layers if self.prompt_cache is not None else self._cache

    def start(self) -> None:
        if self.prompt_cache is None:
            self._cache, reused = make_cache(self.model, max_trim=self.k + 1, rollback=self.speculative,
                                             kv_bits=self.kv_bits, kv_group_size=self.kv_group_size,
                                             recurrent=True), 0
        else:
            reused = self.prompt_cache.reuse(self.model, self.prompt_ids, self.k, self.kv_bits)
        self._start(reused)

    def adopt(self, cache: PromptCache) -> PromptCache:
        """Before any of the prompt was fed: take ``cache`` (a prompt cache that shares more
        of this prompt than ours, e.g. a fork of a twin request's just prefilled cache) in
        place of ours, which is returned; the prompt tokens still to feed shrink to match."""
        if self.prompt_cache is None or self.prompt_cache.tokens != list(self.prompt_ids[: self.stats.cached_tokens]):
            raise ValueError("a request adopts a prompt cache only before its prefill, with one")
        old, self.prompt_cache = self.prompt_cache, cache
        reused = cache.reuse(self.model, self.prompt_ids, self.k, self.kv_bits)
        self.stats.cached_tokens, self.pending = reused, self.prompt_ids[reused:-1]
        return old

    def _start(self, reused: int) -> None:
        if self.tree_budget and isinstance(self.layers, RecurrentCache):
            raise ValueError("token trees (--draft-tree-budget) are not verified on models with "
                             "recurrent layers: use linear drafts (--draft-tree-budget 0)")
        s = self.stats
        s.drafter, s.prompt_tokens, s.cached_tokens = self.drafter.name, len(self.prompt_ids), reused
        self.rng = None if self.sampling.greedy else Rng(self.sampling.seed)
        self.t0 = time.perf_counter()
        self.drafter.constrain(next((p for p in self.processors if isinstance(p, Grammar)), None))
        self.drafter.begin(list(self.prompt_ids))  # per-request state (a draft model prefills here)
        self.pending = self.prompt_ids[reused:-1]

    def prefill(self, chunk: int | None = None) -> bool:
        n = len(self.pending) if chunk is None else chunk
        part, self.pending = self.pending[:n], self.pending[n:]
        prefill(self.model, self.layers, part, self.prefill_step_size)
        if self.prompt_cache is not None:
            self.prompt_cache.fed(part)
        if self.pending:
            return False
        self.stats.prefill_s = time.perf_counter() - self.t0
        return True

    def row(self) -> Row:
        if self._row is None:
            self._row = Row(list(self.prompt_ids), self.drafter, self.k, self.sampling, self.budget,
                            rng=self.rng, top_logprobs=self.top_logprobs, diagnostics=self.diagnostics,
                            tree_budget=self.tree_budget, shaper=self.shaper, extra=self.processors)
        return self._row

    def feed(self, step: Step) -> list[Emitted]:
        stats, out = self.stats, []
        stats.record_step(step.drafted, step.accepted, step.fed, step.depth)
        if self.step_log is not None:
            self.step_log.append((step.fed, step.accepted))
        for i, tok in enumerate(step.tokens):
            if tok in self.eos:
                self.finish_reason = "stop"
                return out
            now = time.perf_counter()
            stats.generated_tokens += 1
            self.budget[0] = self.max_tokens - stats.generated_tokens
            stats.ttft_s = stats.ttft_s or now - self.t0
            stats.decode_s = now - self.t0 - stats.prefill_s
            self.tokens.append(tok)
            e = Emitted(tok, i < step.accepted, step.margins[i] if step.margins else None,
                        step.logprobs[i], step.top[i] if step.top else None)
            out.append(e)
            if self.text is not None:
                e.text, self.stopped = self.text.feed(tok)
            if self.stopped or self.budget[0] <= 0:
                self.finish_reason = "stop" if self.stopped else "length"
                return out
        return out

    def tail(self) -> str:
        return "" if self.stopped or self.text is None else self.text.tail()

    def finish(self, ok: bool = True, layers: list[Any] | None = None) -> None:
        if self.prompt_cache is None:
            return
        if layers is not None:
            self.prompt_cache.layers = layers
        if ok:
            self.prompt_cache.settle(self.prompt_ids + self.tokens)
        else:
            self.prompt_cache.reset()

    def steps(self) -> Iterator[Step]:
        """The single-stream steps after ``prefill``: a batch of one, or pipelined plain
        decoding when nothing needs the host between tokens (no drafter, and no processor
        beyond those ``SamplingParams`` asks for)."""
        if not self.speculative and not self.processors:  # plain, pipelined
            yield from plain_steps(self.model, self.layers, self.prompt_ids, self.sampling, self.rng,
                                   self.diagnostics, self.top_logprobs)
            return
        batch, row = Batch(self.model), self.row()
        batch.join(row, self.layers)
        pausable = not self.processors and all(p.pipelined for p in processors_for(self.sampling))
        while True:
            if pausable and self.drafter.paused:  # a paused drafter may start so (the gate)
                layers = batch.leave(0)
                yield from self._plain_stretch(row, layers)
                batch.join(row, layers)
            yield batch.step()[0]

    def _plain_stretch(self, row: Row, layers: list[Any]) -> Iterator[Step]:
        """Pipelined plain steps while the drafter is paused; the cache then holds the
        row's context but its last token again, ready for the next verify step."""
        if isinstance(layers, RecurrentCache):
            layers.settle()  # the last rollback's kept tokens, before plain forwards
        keys = row.sampler if isinstance(row.sampler, SeededSampler) else self.rng
        plain = plain_steps(self.model, layers, row.context, self.sampling, keys, self.diagnostics,
                            self.top_logprobs, until=lambda: not self.drafter.paused)
        while True:
            t0 = time.perf_counter()
            step = next(plain, None)
            if step is None:
                return
            self.drafter.step_time(0, time.perf_counter() - t0)
            row.context.extend(step.tokens)
            yield step
            self.drafter.watch(row.context)

    def run(self) -> Iterator[Emitted]:
        """Emitted tokens until the request finishes; call after ``start`` and ``prefill``."""
        ok, sent = False, 0
        try:
            for step in self.steps():
                for e in self.feed(step):
                    sent += 1
                    yield e
                if self.finish_reason:
                    break
            ok = True
        except GeneratorExit:  # closed early: what was handed out stands, nothing more
            ok = True
            del self.tokens[sent:]
            raise
        finally:
            self.finish(ok)


def prefill_together(model: Any, requests: Sequence[Request]) -> list[RowsKVCache]:
    """See the module docstring."""
    layers = prefill_rows(model, [r.layers for r in requests], [r.pending for r in requests],
                          requests[0].prefill_step_size)
    now = time.perf_counter()
    for r in requests:
        r.pending = []
        r.stats.prefill_s = now - r.t0
    return layers
