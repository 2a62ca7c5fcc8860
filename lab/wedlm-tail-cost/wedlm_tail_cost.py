"""What one lossless WeDLM step costs in target forwards, before and after the mask tail.

Before, the drafter ran its own forward (the new token + k masks) beside the verify forward
(last + k drafts); now the k + 1 masks ride on the verify block (``drafters.wedlm``). The
cost of a forward depends on the shapes, not on the weights, so any model of the shape
prices it: this measures the verify cost curve (``specdec.measure.verify_cost_curve``) of
``--model`` here, or reads a curve ``lab/verify-cost-curves/cost_shapes.py`` wrote (``--curve``), and prints
both step costs in units of one 1-token forward. Not a WeDLM speed claim: acceptance needs
a real checkpoint.

    python lab/wedlm-tail-cost/wedlm_tail_cost.py --model qwen2.5-coder-0.5b
    python lab/wedlm-tail-cost/wedlm_tail_cost.py --curve lab/verify-cost-curves/h100/cost_bf16.json
"""

from __future__ import annotations

import argparse
import json

KS = (2, 4, 8, 16)


def step_costs(relative: dict[int, float]) -> list[dict[str, float]]:
    """Per k: the two-forward step, the one forward with its tail, and their ratio."""
    rows = []
    for k in KS:
        if 2 * k + 2 not in relative:
            continue
        two, one = 2 * relative[1 + k], relative[2 * k + 2]
        rows.append({"k": k, "two_forwards": round(two, 3), "one_forward_with_tail": round(one, 3),
                     "ratio": round(one / two, 3)})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a model name specdec.load knows: measure its curve here")
    p.add_argument("--curve", help="a cost_shapes.py JSON: read its models' curves instead")
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args()
    out: dict[str, object] = {}
    if args.curve:
        data = json.load(open(args.curve))
        out = {"source": args.curve, "device": data.get("device"), "dtype": data.get("dtype"),
               "models": {m: step_costs({int(L): r for L, r in v["relative"].items()})
                          for m, v in data["models"].items()}}
    if args.model:
        from specdec import load
        from specdec.measure import verify_cost_curve

        model, _ = load(args.model)
        curve = verify_cost_curve(model, max_len=2 * max(KS) + 2, repeats=args.repeats)
        out = {"model": args.model, "device": "this machine",
               "relative": {L: round(c / curve[1], 3) for L, c in sorted(curve.items())},
               "steps": step_costs({L: c / curve[1] for L, c in curve.items()})}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
