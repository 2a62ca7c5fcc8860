"""A batcher's prefill: arriving prompts together in one forward (padded to the longest,
at most ``CHUNK`` tokens; ``FRESH_TOKENS`` for a burst into an idle batch), else a chunk of
the oldest; a prompt just prefilled shares its cache with the waiting prompts that start
with more of it than their own caches hold.

Contract: a mixin of ``batcher.Batcher`` (its ``prefilling``, ``decoding``, ``batch`` and
``worker``), on the inference thread only; a prefill's failure is its jobs' alone, the
batch is left as it was. Tests: tests/server/test_batcher.py."""

from __future__ import annotations

from collections.abc import Callable

from ...cache.prompt_cache import common_prefix
from ...decode.batch import Batch
from ...decode.request import prefill_together
from .rows import Active, WorkerPort

CHUNK = 256  # prefill tokens per scheduling round: bounds the stall of the running rows
# prefill tokens a round may take while no row has stepped yet (a burst into an idle batch):
# eight short chat prompts (~45 tokens) arriving together, as mlx_lm.server's prefill batch
FRESH_TOKENS = 2 * CHUNK


class Prefilling:
    """``Batcher``'s prefill side."""

    # the batcher's state and steps used here (``batcher.Batcher``)
    worker: WorkerPort
    batch: Batch
    prefilling: list[Active]
    decoding: list[Active | None]
    _synced: Callable[[], None]
    _failed: Callable[[Active, BaseException], None]
    _admit: Callable[[float], None]

    def _prefill(self) -> None:
        """This round's prefill: one group (``CHUNK`` tokens). While no row of the batch has
        taken a step yet (a burst arriving at an idle server), it goes on with the jobs
        still waiting and those admitted meanwhile, up to ``FRESH_TOKENS``, before the
        batch's first step. Why: the HTTP side queues a burst's jobs a few ms apart, so the
        first is admitted alone; stepping it first made every other job wait its prefill,
        its first step and a step more for their first tokens (p50 TTFT 0.3 s behind
        mlx_lm.server at 8 clients: lab/serve-throughput-vs-mlx-lm/first-token)."""
        fed, fresh = 0, self._fresh()
        while self.prefilling:  # fresh: the burst's prompts in as few forwards as fit
            group = self._prefill_group(FRESH_TOKENS - fed if fresh else CHUNK)
            padded = max(len(a.req.pending) for a in group) * len(group)
            if len(group) > 1:
                self._prefill_together(group)
            else:
                self._prefill_chunk(group[0])
                padded = min(padded, CHUNK)
            fed += padded
            if not fresh or fed >= FRESH_TOKENS:
                return
            self._admit(0)  # the jobs that arrived during this prefill

    def _fresh(self) -> bool:
        """Whether no row of the batch has taken a step (none queued, none emitted): more
        prefill now delays no row's next token, only the first tokens of rows that have none."""
        return not self.batch.queued and all(a is None or not a.req.tokens for a in self.decoding)

    def _prefill_group(self, tokens: int = CHUNK) -> list[Active]:
        """The oldest prefilling jobs whose prompts, padded to the longest, take at most
        ``tokens`` (at least the oldest job)."""
        group, longest = self.prefilling[:1], len(self.prefilling[0].req.pending)
        if self.worker.max_batch == 1:
            return group
        for a in self.prefilling[1:]:
            longest = max(longest, len(a.req.pending))
            if longest * (len(group) + 1) > tokens:
                break
            group.append(a)
        return group

    def _prefill_together(self, group: list[Active]) -> None:
        """Prefill ``group`` in one batched forward and join it to the batch; a failure
        fails the group's jobs and leaves the batch as it was."""
        for a in group:
            self.prefilling.remove(a)
        try:
            layers = prefill_together(self.worker.model, [a.req for a in group])
            self.batch.join_rows([a.req.row() for a in group], layers)
        except Exception as e:  # noqa: BLE001 (these jobs' failure; the batch is untouched)
            self._synced()
            for a in group:
                self._failed(a, e)
            return
        self._synced()
        self.decoding.extend(group)

    def _prefill_chunk(self, a: Active) -> None:
        try:
            if not a.req.prefill(CHUNK):
                return
            self.prefilling.remove(a)
            self._share_prompt(a)
            self.batch.join(a.req.row(), a.req.layers)
        except Exception as e:  # noqa: BLE001 (this job's failure; the batch is untouched)
            self._synced()
            if a in self.prefilling:
                self.prefilling.remove(a)
            self._failed(a, e)
            return
        self._synced()
        self.decoding.append(a)

    def _share_prompt(self, a: Active) -> None:
        """``a`` has just prefilled its prompt: every job still waiting for its prefill whose
        prompt starts with more of it than its own cache holds takes a fork of ``a``'s cache
        instead (prompts arriving together often repeat a document or a whole request, and
        the prefix store only hears of a cache when its request finishes). The fork shares
        ``a``'s arrays; the cache it replaces goes back to the store."""
        cache = a.req.prompt_cache
        if cache is None:
            return
        for b in self.prefilling:
            n = common_prefix(cache.tokens, b.req.prompt_ids[:-1])
            if b.req.prompt_cache is None or n <= len(b.req.prompt_cache.tokens) \
                    or b.req.stats.cached_tokens != len(b.req.prompt_cache.tokens) \
                    or b.req.prompt_cache.scope != cache.scope:
                continue  # nothing gained, b has fed part of its prompt, or another tenant's
            forked = cache.fork(n)
            if forked is not None:
                self.worker.prefixes.put(b.req.adopt(forked))
