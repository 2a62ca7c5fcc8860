"""Speculation statistics for one request.

Definitions (vLLM's): acceptance_rate = accepted / drafted; mean_acceptance_length =
(accepted + verify steps) / verify steps; per-position acceptance; p_cache = emitted / fed
(1.0 for plain decoding). tokens_per_forward is Spec-Bench's "mean accepted tokens": every
token a forward emitted, the end-of-sequence token that ended the output included, over the
target forwards after prefill (plain decoding: exactly 1.0; ``generated_tokens`` leaves
that last token out, as the output and its usage do). decode_tokens_per_s times plain and speculative
runs over exactly the same work (after prefill). Full definitions: docs/verify-and-rollback.md#statistics.
Tests: tests/core/test_stats.py, tests/test_engine.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecStats:
    drafter: str = "none"
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens a prompt cache already held (not prefilled)
    generated_tokens: int = 0
    emitted_tokens: int = 0  # generated_tokens + the EOS token that ended the output, if one did
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    draft_steps: int = 0  # steps that verified a draft (the rest decoded one plain token)
    fed_tokens: int = 0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    ttft_s: float = 0.0
    decode_s: float = 0.0

    def record_step(self, drafted: int, accepted: int, fed: int, depth: int | None = None) -> None:
        """One verify step; per-position counts go by draft depth (a tree drafts several
        nodes per position: ``depth`` is its depth, None for a linear draft)."""
        self.verify_steps += 1
        self.draft_steps += drafted > 0
        self.drafted += drafted
        self.accepted += accepted
        self.fed_tokens += fed
        depth = drafted if depth is None else depth
        while len(self.drafted_by_position) < depth:
            self.drafted_by_position.append(0)
            self.accepted_by_position.append(0)
        for i in range(depth):
            self.drafted_by_position[i] += 1
            self.accepted_by_position[i] += i < accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return (self.accepted + self.verify_steps) / self.verify_steps if self.verify_steps else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.emitted_tokens / self.verify_steps if self.verify_steps else 0.0

    @property
    def p_cache(self) -> float:
        return self.emitted_tokens / self.fed_tokens if self.fed_tokens else 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return max(self.prompt_tokens - 1, 0) / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.generated_tokens / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()}
        for name in (
            "acceptance_rate",
            "mean_acceptance_length",
            "tokens_per_forward",
            "p_cache",
            "prefill_tokens_per_s",
            "decode_tokens_per_s",
        ):
            d[name] = getattr(self, name)
        return d
