"""Proof of losslessness: compare speculative with plain greedy decoding and diagnose.

Contract: ``check_parity(...)`` returns a ``ParityReport``; on a divergence it names the first
differing position, both tokens, their top-2 margins and a verdict against the shape-matched
reference (the speculative tokens teacher-forced in the same block boundaries): disagreeing
with it is a logic bug, agreeing is a near-tie rounded differently by block-shaped kernels.
Tests: tests/test_parity.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

import mlx.core as mx

from .core.arrays import floats, ints
from .core.model import Model
from .engine import GenerationResult, generate
from .decode.generation import Generation
from .decode.step import top2_margin
from .cache.rollback import prefill
from .cache.rollback import make_cache


@dataclass
class ParityReport:
    identical: bool
    verdict: str
    tokens_compared: int
    position: int | None = None
    plain_token: int | None = None
    spec_token: int | None = None
    plain_margin: float | None = None
    spec_margin: float | None = None
    reference_position: int | None = None  # first shape-matched mismatch (logic bug)
    reference_token: int | None = None
    plain_tokens_per_s: float = 0.0
    spec_tokens_per_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def shape_matched_reference(
    model: Model,
    prompt_ids: Sequence[int],
    tokens: Sequence[int],
    steps: Sequence[tuple[int, int]],
    prefill_step_size: int = 512,
) -> tuple[list[int], list[float]]:
    """The model's argmax (and top-2 margin) after each prefix of ``tokens`` — one more
    than ``len(tokens)``: the last is what follows them all (EOS if the run ended there) —
    fed in the speculative run's block boundaries without rollback (docs/verify-and-rollback.md#parity-checks)."""
    cache = make_cache(model, rollback=False)
    prefill(model, cache, prompt_ids[:-1], prefill_step_size)
    seq = [prompt_ids[-1], *tokens]
    preds: list[int] = []
    margins: list[float] = []
    pos = 0
    for _, accepted in steps:
        block = seq[pos : pos + accepted + 1]
        if not block or len(preds) > len(tokens):
            break
        logits = model(mx.array(block)[None], cache=cache)[0]
        am, mg = mx.argmax(logits, axis=-1), top2_margin(logits)
        mx.eval(am, mg)
        preds += ints(am)
        margins += floats(mg)
        pos += len(block)
    return preds[: len(tokens) + 1], margins[: len(tokens) + 1]


def diagnose(
    model: Model,
    plain: GenerationResult,
    spec: GenerationResult,
    eos: set[int] | frozenset[int] = frozenset(),
    prefill_step_size: int = 512,
) -> ParityReport:
    """A ParityReport for two finished runs made with ``diagnostics=True``; ``eos`` are
    the ids that end generation (to check a run that stopped early)."""
    a, b = plain.tokens, spec.tokens
    n = min(len(a), len(b))
    report = ParityReport(
        identical=a == b,
        verdict="identical",
        tokens_compared=n,
        plain_tokens_per_s=plain.stats.decode_tokens_per_s,
        spec_tokens_per_s=spec.stats.decode_tokens_per_s,
    )
    if a == b:
        return report
    p = next((i for i in range(n) if a[i] != b[i]), n)
    report.position = p
    report.plain_token = a[p] if p < len(a) else None
    report.spec_token = b[p] if p < len(b) else None
    report.plain_margin = plain.margins[p] if p < len(plain.margins) else None
    report.spec_margin = spec.margins[p] if p < len(spec.margins) else None
    preds, margins = shape_matched_reference(
        model, spec.prompt_tokens, b[: p + 1], spec.steps, prefill_step_size
    )
    bad = next((i for i, (x, y) in enumerate(zip(preds, b[: p + 1])) if x != y), None)
    if bad is None and p == len(b) and spec.finish_reason == "stop" and p < len(preds):
        if preds[p] not in eos:  # the run ended with an EOS the model did not choose
            bad = p
    if bad is not None:
        emitted = b[bad] if bad < len(b) else "EOS"
        report.reference_position, report.reference_token = bad, preds[bad]
        report.verdict = (
            f"logic bug: at position {bad} the speculative run emitted {emitted} but the model, "
            f"fed the same tokens in the same blocks without rollback, chooses {preds[bad]} "
            f"(margin {margins[bad]:.3g})"
        )
    elif report.plain_token is None or report.spec_token is None:
        report.verdict = "length mismatch: one run stopped earlier (EOS or stop string at a near-tie)"
    else:
        report.verdict = (
            f"kernel near-tie: the speculative token is the model's own choice through "
            f"verification-shaped blocks; plain decoding's top-2 margin at position {p} is "
            f"{report.plain_margin:.3g} (speculative path {report.spec_margin:.3g})"
        )
    return report


def check_parity(model: Model, tokenizer: Any, prompt: Any, **kwargs: Any) -> ParityReport:
    """Run plain and speculative decoding (``kwargs`` as for ``generate``) and compare."""
    gen = kwargs.get("generation")
    if gen is not None:  # the one value: with its margins on
        gen = kwargs["generation"] = replace(gen, diagnostics=True)
    else:
        kwargs = {**kwargs, "diagnostics": True}
    plain = generate(model, tokenizer, prompt, **{**kwargs, "drafter": None})
    spec = generate(model, tokenizer, prompt, **kwargs)
    eos = set(tokenizer.eos_token_ids)
    step = gen.prefill_step_size if gen is not None else kwargs.get("prefill_step_size") or Generation.prefill_step_size
    return diagnose(model, plain, spec, eos, step)
