"""Logits processors: what a request applies to the target's logits before it samples.

Contract: a ``LogitsProcessor`` processes a block (R, V) where row r follows ``context +
seen[r]``, so every verified position is processed as plain decoding would; a
``WindowProcessor`` reads only the last ``size`` tokens (same arithmetic on host and device);
a ``stateful`` one gets ``accept(tokens)`` after each step; ``processors_for(params)`` is
mlx-lm's order: logit bias, repetition, presence, frequency.
Tests: tests/core/test_processors.py, tests/core/test_sampling.py, tests/test_engine.py.
Details: docs/verify-and-rollback.md#logits-processors.

    >>> import mlx.core as mx
    >>> FrequencyPenalty(0.5, 4)(mx.zeros((2, 5)), [1, 1, 2], [[], [1]]).tolist()
    [[0.0, -1.0, -0.5, 0.0, 0.0], [0.0, -1.5, -0.5, 0.0, 0.0]]"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from .sampling import SamplingParams, penalize


class LogitsProcessor:
    """Changes a block of logits (R, V), row r after ``context + seen[r]``. ``stateful``
    processors also implement ``accept``."""

    stateful = False
    pipelined = False  # can run in the pipelined plain loop (WindowProcessor, LogitBias)

    def __call__(self, logits: mx.array, context: Sequence[int],
                 seen: Sequence[Sequence[int]]) -> mx.array:
        raise NotImplementedError

    def accept(self, tokens: Sequence[int]) -> None:
        """The step emitted ``tokens`` (stateful processors advance here)."""


class WindowProcessor(LogitsProcessor):
    """A processor of each row's last ``size`` tokens (docs/verify-and-rollback.md#logits-processors)."""

    size = 20
    pipelined = True

    def apply(self, logits: mx.array, windows: mx.array) -> mx.array:
        raise NotImplementedError

    def __call__(self, logits, context, seen):
        rows = [(list(context[-self.size:]) + list(s))[-self.size:] for s in seen]
        if min(map(len, rows)) == max(map(len, rows)):  # equal widths: one gather
            return self.apply(logits, mx.array(rows, dtype=mx.int32))
        # a history shorter than the window: rows differ in width
        return mx.concatenate([self.apply(logits[i : i + 1], mx.array([r], dtype=mx.int32))
                               for i, r in enumerate(rows)])


class RepetitionPenalty(WindowProcessor):
    """mlx-lm's repetition penalty: a seen token's logit divided by the penalty when
    positive, multiplied when negative."""

    def __init__(self, penalty: float, size: int):
        self.size = size
        self.params = SamplingParams(repetition_penalty=penalty, repetition_context_size=size)

    def apply(self, logits, windows):
        return penalize(logits, windows, self.params)


class PresencePenalty(WindowProcessor):
    """Subtract ``penalty`` once from every token seen in the window (OpenAI's
    ``presence_penalty``, mlx-lm's ``make_presence_penalty``)."""

    def __init__(self, penalty: float, size: int):
        self.penalty, self.size = penalty, size

    def apply(self, logits, windows):
        if windows.shape[-1] == 0:
            return logits
        sel = mx.take_along_axis(logits, windows, axis=-1) - self.penalty
        return mx.put_along_axis(logits, windows, sel, axis=-1)  # repeats write one value


class FrequencyPenalty(WindowProcessor):
    """Subtract ``penalty`` per occurrence in the window (OpenAI's ``frequency_penalty``,
    mlx-lm's ``make_frequency_penalty``)."""

    def __init__(self, penalty: float, size: int):
        self.penalty, self.size = penalty, size

    def apply(self, logits, windows):
        if windows.shape[-1] == 0:
            return logits
        rows = mx.broadcast_to(mx.arange(logits.shape[0])[:, None], windows.shape)
        return logits.at[rows, windows].subtract(self.penalty)  # repeats accumulate


class LogitBias(LogitsProcessor):
    """Add ``bias[token]`` to every row (OpenAI's ``logit_bias``)."""

    pipelined = True

    def __init__(self, bias: Sequence[tuple[int, float]]):
        self.max_id = max(t for t, _ in bias)
        self.ids = mx.array([t for t, _ in bias], dtype=mx.int32)
        self.values = mx.array([b for _, b in bias], dtype=mx.float32)

    def add(self, logits: mx.array) -> mx.array:
        if self.max_id >= logits.shape[-1]:
            raise ValueError(f"logit_bias names token id {self.max_id}, beyond the model's "
                             f"{logits.shape[-1]} logits")
        return logits.at[:, self.ids].add(self.values.astype(logits.dtype))

    def __call__(self, logits, context, seen):
        return self.add(logits)


def processors_for(params: SamplingParams) -> list[LogitsProcessor]:
    """The processor chain ``params`` asks for (empty: none); mlx-lm's order."""
    out: list[LogitsProcessor] = []
    if params.logit_bias:
        out.append(LogitBias(params.logit_bias))
    if params.repetition_penalty != 1.0:
        out.append(RepetitionPenalty(params.repetition_penalty, params.repetition_context_size))
    if params.presence_penalty:
        out.append(PresencePenalty(params.presence_penalty, params.presence_context_size))
    if params.frequency_penalty:
        out.append(FrequencyPenalty(params.frequency_penalty, params.frequency_context_size))
    return out
