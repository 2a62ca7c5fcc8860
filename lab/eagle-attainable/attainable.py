"""Issue #47: what draft acceptance would a head need to meet the issue's speed bars on this CPU?

Measures, on the machine at hand, the target's verify cost curve (``measure.verify_cost_floors``,
what the gate prices on) and an EAGLE-3 head's drafting cost (``measure.head_cost`` on a head
shaped by ``train-drafter``: cost does not depend on training), then solves the linear-draft
model: with a conditional acceptance ``a`` at every draft position, k drafts emit
E(k) = (1 - a^(k+1)) / (1 - a) tokens per target forward (the bonus token included) for
c(k+1)/c(1) + (fixed + k * per_token)/c(1) one-token steps, so speedup(a) = max_k E(k) / cost(k).
Prints the curve, the best k and speedup at each a, and the smallest a that reaches the issue's
bars (1.8x with 2.5 tokens per forward for SmolLM2-135M, 1.5x for Qwen2.5-Coder-0.5B).

    PYTHONPATH=. python3 lab/eagle-attainable/attainable.py smollm2-135m [qwen2.5-coder-0.5b]
"""

from __future__ import annotations

import json
import sys

import numpy as np

import specdec
from specdec.eagle.head import default_layer_ids
from specdec.eagle.pipeline import DrafterOptions, new_head
from specdec.measure import head_cost, verify_cost_floors

MAX_K = 16


def expected_tokens(a: float, k: int) -> float:
    """Tokens per target forward of k linear drafts, each accepted with probability a given the
    ones before it were (the target's own token after the last accepted one counts)."""
    return float(sum(a ** i for i in range(k + 1)))


def best(a: float, cost: dict[int, float], draft: dict[str, float]) -> tuple[int, float, float]:
    """(k, speedup, tokens per forward) of the fastest k for acceptance a."""
    c1 = cost[1]
    rows = []
    for k in range(1, MAX_K + 1):
        steps = cost[k + 1] / c1 + (draft["fixed"] + k * draft["per_token"]) / c1
        rows.append((expected_tokens(a, k) / steps, k))
    s, k = max(rows)
    return k, s, expected_tokens(a, k)


def smallest(bar: float, cost: dict[int, float], draft: dict[str, float], tpf: float = 0.0) -> float | None:
    """The smallest a (to 0.005) whose best k reaches ``bar`` x and ``tpf`` tokens per forward."""
    for a in np.arange(0.0, 1.0001, 0.005):
        k, s, t = best(float(a), cost, draft)
        if s >= bar and t >= tpf:
            return round(float(a), 3)
    return None


def measure(name: str) -> dict:
    model, _ = specdec.load(name, dtype="float32")
    cost = verify_cost_floors(model, MAX_K + 1).curve
    layers = len(model.model.layers)
    head = new_head(model, np.arange(8192), default_layer_ids(layers), DrafterOptions(), seed=0)
    draft = head_cost(head)
    return {"model": name, "cost": cost, "draft": draft}


def report(m: dict, bar: float, tpf: float) -> None:
    cost, draft = m["cost"], m["draft"]
    c1 = cost[1]
    print(f"\n{m['model']}: one-token step {c1 * 1e3:.1f} ms; head draft cost fixed "
          f"{draft['fixed'] * 1e3:.2f} ms + {draft['per_token'] * 1e3:.2f} ms a token "
          f"({(draft['fixed'] + draft['per_token']) / c1:.3f} + {draft['per_token'] / c1:.3f} steps)")
    print("verify cost c(L)/c(1):", " ".join(f"{L}:{cost[L] / c1:.2f}" for L in sorted(cost)))
    print("  a     best k  speedup  tokens/forward")
    for a in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95):
        k, s, t = best(a, cost, draft)
        print(f"  {a:.2f}  {k:5d}  {s:7.3f}  {t:6.2f}")
    print(f"smallest a for {bar}x: {smallest(bar, cost, draft)}; for {bar}x and {tpf} tokens/forward: "
          f"{smallest(bar, cost, draft, tpf)}; for 1.3x: {smallest(1.3, cost, draft)}; "
          f"for 1.0x: {smallest(1.0, cost, draft)}")


def main() -> None:
    bars = {"smollm2-135m": (1.8, 2.5), "qwen2.5-coder-0.5b": (1.5, 0.0)}
    for name in sys.argv[1:] or ["smollm2-135m"]:
        m = measure(name)
        print(json.dumps({**m, "cost": {str(k): v for k, v in m["cost"].items()}}))
        report(m, *bars.get(name, (1.8, 2.5)))


if __name__ == "__main__":
    main()
