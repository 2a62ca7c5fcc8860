"""A request's decode policy from its ``DraftSpec``: the cost gate (default), adaptive k, or
the depth asked every step (``--no-gate``). Tests: tests/drafters/test_spec.py."""

from __future__ import annotations

from ..drafters.base import Drafter
from ..drafters.spec import DraftResources, DraftSpec, build_drafter
from .adaptive import AdaptiveK
from .drafting import DecodePolicy
from .gate import CostGate


def policy_for(spec: DraftSpec, res: DraftResources, drafter: Drafter) -> DecodePolicy:
    """The spec's policy over ``drafter``: the cost gate (default), adaptive k, or none."""
    if not (spec.speculative and (spec.gate or spec.adaptive_k)):
        return DecodePolicy(drafter)
    if res.cost is None:
        what = "the cost gate (on by default; gate=False / --no-gate turns it off)" \
            if spec.gate else "adaptive k"
        raise ValueError(f"{what} needs the model's verify cost curve: build the drafter "
                         "with specdec.prepare_resources(spec, model, tokenizer)")
    if not spec.gate:
        return AdaptiveK(drafter, res.cost, spec.num_draft_tokens, draft_cost=res.draft_cost)
    # what gates on this curve (model and machine) learnt carries to this one (None: learns alone)
    memory = res.learnt.on(res.cost) if res.learnt is not None else None
    return CostGate(drafter, res.cost, spec.num_draft_tokens, draft_cost=res.draft_cost,
                    memory=memory)


def build_policy(spec: DraftSpec, resources: DraftResources | None = None, *,
                 temperature: float = 0.0, seed: int | None = None) -> DecodePolicy:
    """A fresh drafter for one request (``drafters.spec.build_drafter``) under the spec's policy."""
    res = resources or DraftResources()
    return policy_for(spec, res, build_drafter(spec, res, temperature=temperature, seed=seed))
