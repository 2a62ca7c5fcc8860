"""The drafter contract.

A drafter guesses the next tokens; the target model has the final word, so a drafter can
only change speed, never output. Contract:

- ``propose(context, k)`` returns at most ``k`` token ids that it guesses follow
  ``context`` (the prompt plus every token emitted so far, append-only within a request;
  a context that is not an extension of the previous one starts a new request). An empty
  list means "no guess": the engine then runs a plain one-token step.
- ``observe(num_accepted)`` reports how many of the last proposal's tokens the target
  accepted (0..len(proposal)); drafters with state (adaptive ones, draft models) use it.

- optional ``begin(prompt_ids)``: the engine calls it at the start of every request, so a
  drafter with per-request state need not guess where a request starts.
- optional ``last_q``: for drafters that sample, an mx.array (len(proposal), vocab) of the
  distribution each proposed token was drawn from (exact rejection sampling needs it);
  absent or None means the proposal is deterministic (a point mass).

``name`` identifies the drafter in stats and reports.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable


@runtime_checkable
class Drafter(Protocol):
    name: str

    def propose(self, context: Sequence[int], k: int) -> list[int]: ...

    def observe(self, num_accepted: int) -> None: ...


class NoDrafter:
    """Plain decoding: never proposes anything."""

    name = "none"

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        return []

    def observe(self, num_accepted: int) -> None:
        pass
