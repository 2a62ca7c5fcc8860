"""Issue #46: a ``--quick`` run's own plain answers (any model) replayed under the gate and ungated.

Rebuilds each question's turns from the run's journal (``records.jsonl.gz``: its first measured plain
run, ``replay.full_results``), then ``replay.replay`` with the run's cost curve as the gate's curve and
two clocks: the curve itself (the gate's prices right by construction) and SmolLM2's traced step ratios
(``replay.OBSERVED``), each without and with step-time noise 0.12 (seeded). Prints tokens per forward and
the geomean speedup per category, as ``replay.py`` does.

    PYTHONPATH=. python3 lab/specbench/engine-clock/quick_replay.py RECORDS.jsonl.gz MODEL [CLOCK_JSON]

CLOCK_JSON, a third clock: {"P": pipelined token, "1": 1, "2": ..., "9": ...} over a one-token step (a
``--trace`` run's medians, e.g. ``trace_clock.py``'s).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

E = Path(__file__).resolve().parent
sys.path.insert(0, str(E))
sys.path.insert(0, str(E.parents[1] / "gate-acceptance"))
sys.path.insert(0, str(E.parents[1] / "gate-trace"))

import specdec  # noqa: E402
import replay as R  # noqa: E402
from calibration import turns  # noqa: E402
from gate_specbench_replay import gate_class  # noqa: E402
from specdec.policy.learnt import Learnt  # noqa: E402


def main() -> None:
    path = R.full_results(sys.argv[1], run=1)
    curve = {int(k): v for k, v in json.load(open(path))["cost_curve"].items()}
    model, tok = specdec.load(sys.argv[2], dtype="float32")
    del model
    by_q = defaultdict(list)
    for q in turns(path, tok):
        by_q[q.name].append(q)
    c1 = curve[1]
    clocks = {"own curve": {**{L: v / c1 for L, v in curve.items()}, "P": 0.99}, "smollm2 traced": R.OBSERVED}
    if len(sys.argv) > 3:
        clocks["given"] = {(k if k == "P" else int(k)): v for k, v in json.loads(sys.argv[3]).items()}
    for name, ratio in clocks.items():
        clock = {L: c1 * r for L, r in ratio.items()}
        print("clock", name, {k: round(v, 2) for k, v in ratio.items()})
        for sd in (0.0, 0.12):
            R.SD = sd
            for config, gc in (("ungated", None), ("gate", gate_class(None))):
                R.NOISE.seed(0)
                memory = Learnt()  # one per config, carried across questions as a bench run carries it
                rows = [r for qs in by_q.values() for r in R.replay(qs, tok, curve, clock, gc, memory)]
                R.summary(f"{config} sd{sd}", rows)


if __name__ == "__main__":
    main()
