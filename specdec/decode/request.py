"""One request's lifecycle, the same for the library (``engine``) and the server's batcher:
``start`` → ``prefill`` (or ``prefill_together``) → ``steps`` (``loop.stream``) fed to
``feed`` → ``finish``; ``run`` drives all of it for a single stream.

Invariant: ``feed`` ends the output at EOS (not emitted), ``max_tokens`` or a stop string,
even inside an accepted block; a prompt cache afterwards holds exactly prompt + emitted
tokens, or is emptied after an error. Tests: tests/decode/test_request.py, tests/test_engine.py,
tests/cache/test_prompt_cache.py, tests/decode/test_batch.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..cache.batch_cache import RowsKVCache, prefill_rows
from ..cache.errors import refuse_quantized_speculation
from ..cache.prompt_cache import PromptCache
from ..cache.recurrent import refuse_trees
from ..cache.rollback import make_cache, prefill
from ..core.grammar import Grammar
from ..core.model import Model
from ..core.processors import LogitsProcessor
from ..core.sampling import Rng
from ..core.stats import SpecStats
from ..core.text import TextOut
from ..drafters.base import Drafter, NoDrafter
from ..policy.drafting import DecodePolicy, as_policy
from ..policy.tree_shape import TreeShaper
from .generation import Generation
from .loop import stream
from .rows import Row
from .step import Step


@dataclass
class Emitted:
    token: int
    from_draft: bool
    margin: float | None
    logprob: float
    top: list[tuple[int, float]] | None = None
    text: str = ""  # the text this token completes (with a TextOut)


@dataclass(frozen=True)
class TreePlan:
    """A request's token trees, resolved: at most ``budget`` nodes per step (0: linear
    drafts), ``shaper`` choosing each step's count (a budget of ``"auto"``:
    ``engine.tree_policy`` prices it on the model's measured curves)."""

    budget: int = 0
    shaper: TreeShaper | None = None


class Request:
    """One request: its ``Generation`` (validated when built), cache, drafter under its
    decode policy (``drafter=`` a bare ``Drafter`` drafts ``gen.k`` deep every step), stats
    and output. Runtime objects travel beside the value: the drafter, ``eos`` (the
    tokenizer's), the resolved ``tree``, a prompt cache, the stats and step log, the
    detokenizer (``text``, which applies ``gen.stop``) and logits ``processors``."""

    def __init__(self, model: Model, prompt_ids: Sequence[int], gen: Generation = Generation(), *,
                 drafter: Drafter | DecodePolicy | None = None,
                 eos: Sequence[int] | set[int] = (), tree: TreePlan | None = None,
                 prompt_cache: PromptCache | None = None, stats: SpecStats | None = None,
                 step_log: list[tuple[int, int]] | None = None, text: TextOut | None = None,
                 processors: Sequence[LogitsProcessor] = ()):
        if not prompt_ids:
            raise ValueError("the prompt encodes to no tokens")
        tree = tree if tree is not None else _fixed_tree(gen.draft.draft_tree_budget)
        if tree.budget and not getattr(model, "verifies_trees", True):
            raise ValueError("token trees (--draft-tree-budget) do not work on a sharded target "
                             "(--distributed) yet: use linear drafts (--draft-tree-budget 0)")
        self.model, self.prompt_ids, self.gen = model, list(prompt_ids), gen
        self.policy = as_policy(drafter)
        self.drafter = self.policy.drafter
        refuse_quantized_speculation(gen.kv_bits, self.speculative,
                                     "decode plainly with it (drafter=None) or leave kv_bits unset")
        self.sampling, self.k = gen.sampling, gen.k
        self.eos, self.tree_budget, self.shaper = set(eos), tree.budget, tree.shaper
        self.prompt_cache = prompt_cache
        self.stats = stats if stats is not None else SpecStats()
        self.step_log, self.text, self.processors = step_log, text, list(processors)
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.stopped = False  # by a stop string
        self._cache: list[Any] | None = None
        self._row: Row | None = None

    @property
    def speculative(self) -> bool:
        return not isinstance(self.drafter, NoDrafter)

    @property
    def left(self) -> int:
        """The tokens still wanted: ``gen.max_tokens`` less those emitted (counted here only:
        the row's depth reads it, ``Row.left``)."""
        return self.gen.max_tokens - self.stats.generated_tokens

    @property
    def layers(self) -> list[Any]:
        layers = self.prompt_cache.layers if self.prompt_cache is not None else self._cache
        if layers is None:
            raise RuntimeError("the request's cache is made by start(): call it first")
        return layers

    def start(self) -> None:
        """The cache (a prompt cache's longest shared prefix, or a fresh one), the stats,
        the drafter's ``constrain`` and ``begin``, and the prompt tokens left to feed."""
        if self.prompt_cache is None:
            self._cache, reused = make_cache(self.model, max_trim=self.k + 1, rollback=self.speculative,
                                             kv_bits=self.gen.kv_bits,
                                             kv_group_size=self.gen.kv_group_size, recurrent=True), 0
        else:
            reused = self.prompt_cache.reuse(self.model, self.prompt_ids, self.k, self.gen.kv_bits)
        self._start(reused)

    def adopt(self, cache: PromptCache) -> PromptCache:
        """Before any of the prompt was fed: take ``cache`` (a prompt cache that shares more
        of this prompt than ours, e.g. a fork of a twin request's just prefilled cache) in
        place of ours, which is returned; the prompt tokens still to feed shrink to match."""
        if self.prompt_cache is None or self.prompt_cache.tokens != list(self.prompt_ids[: self.stats.cached_tokens]):
            raise ValueError("a request adopts a prompt cache only before its prefill, with one")
        old, self.prompt_cache = self.prompt_cache, cache
        reused = cache.reuse(self.model, self.prompt_ids, self.k, self.gen.kv_bits)
        self.stats.cached_tokens, self.pending = reused, self.prompt_ids[reused:-1]
        return old

    def _start(self, reused: int) -> None:
        refuse_trees(self.layers, self.tree_budget)
        s = self.stats
        s.drafter, s.prompt_tokens, s.cached_tokens = self.policy.name, len(self.prompt_ids), reused
        self.rng = None if self.sampling.greedy else Rng(self.sampling.seed)
        self.t0 = time.perf_counter()
        self.drafter.constrain(next((p for p in self.processors if isinstance(p, Grammar)), None))
        self.policy.begin(list(self.prompt_ids))  # per-request state (a draft model prefills here)
        self.pending = self.prompt_ids[reused:-1]

    def prefill(self, chunk: int | None = None) -> bool:
        """Feed up to ``chunk`` prompt tokens (None: all); True once none are left."""
        n = len(self.pending) if chunk is None else chunk
        start = len(self.prompt_ids) - 1 - len(self.pending)  # the first fed token's position
        part, self.pending = self.pending[:n], self.pending[n:]
        prefill(self.model, self.layers, part, self.gen.prefill_step_size, self.prefill_wants, start)
        if self.prompt_cache is not None:
            self.prompt_cache.fed(part)
        if self.pending:
            return False
        self.stats.prefill_s = time.perf_counter() - self.t0
        return True

    @property
    def prefill_wants(self) -> Any:
        """What the drafter wants of prefill forwards (``Drafter.feed_wants``; None: nothing)."""
        return self.drafter.feed_wants if self.speculative and self.drafter.outputs else None

    def row(self) -> Row:
        if self._row is None:
            self._row = Row(list(self.prompt_ids), self.policy, self.gen, self, rng=self.rng,
                            tree_budget=self.tree_budget, shaper=self.shaper, extra=self.processors)
        return self._row

    def feed(self, step: Step) -> list[Emitted]:
        """One step's tokens as ``Emitted``, recorded in the stats; sets ``finish_reason``."""
        stats = self.stats
        out: list[Emitted] = []
        stats.record_step(step.drafted, step.accepted, step.fed, step.depth)
        if self.step_log is not None:
            self.step_log.append((step.fed, step.accepted))
        for i, tok in enumerate(step.tokens):
            stats.emitted_tokens += 1  # the forward made it, an ending EOS too (tokens per forward)
            if tok in self.eos:
                self.finish_reason = "stop"
                return out
            now = time.perf_counter()
            stats.generated_tokens += 1
            stats.ttft_s = stats.ttft_s or now - self.t0
            stats.decode_s = now - self.t0 - stats.prefill_s
            self.tokens.append(tok)
            e = Emitted(tok, i < step.accepted, step.margins[i] if step.margins else None,
                        step.logprobs[i], step.top[i] if step.top else None)
            out.append(e)
            if self.text is not None:
                e.text, self.stopped = self.text.feed(tok)
            if self.stopped or self.left <= 0:
                self.finish_reason = "stop" if self.stopped else "length"
                return out
        return out

    def tail(self) -> str:
        return "" if self.stopped or self.text is None else self.text.tail()

    def finish(self, ok: bool = True, layers: list[Any] | None = None) -> None:
        """Tell the drafter the request is over (``end``: what it emitted stands, after an
        error too) and settle the prompt cache (``layers``: the cache a batch handed back on
        leaving)."""
        self.policy.end(self.prompt_ids + self.tokens)
        if self.prompt_cache is None:
            return
        if layers is not None:
            self.prompt_cache.layers = layers
        if ok:
            self.prompt_cache.settle(self.prompt_ids + self.tokens)
        else:
            self.prompt_cache.reset()

    def steps(self) -> Iterator[Step]:
        """The single-stream steps after ``prefill`` (``loop.stream``)."""
        return stream(self)

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


def _fixed_tree(budget: int | str) -> TreePlan:
    if not isinstance(budget, int):
        raise ValueError("draft_tree_budget 'auto' is chosen on the model's measured cost curves: "
                         "resolve it with specdec.engine.tree_policy and pass Request(tree=)")
    return TreePlan(budget)


def prefill_together(model: Model, requests: Sequence[Request]) -> list[RowsKVCache]:
    """Prefill several started requests' prompts in one batched forward; the batch cache
    for ``Batch.join_rows`` (each row from its request's ``layers``)."""
    layers = prefill_rows(model, [r.layers for r in requests], [r.pending for r in requests],
                          requests[0].gen.prefill_step_size, [r.prefill_wants for r in requests])
    now = time.perf_counter()
    for r in requests:
        r.pending = []
        r.stats.prefill_s = now - r.t0
    return layers
