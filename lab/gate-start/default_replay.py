"""Issue #46: the default gate (carried offers + the priced start) against ungated suffix k = 8, replayed.

The live loop of ``../gate-live-lag/lag_replay.py`` (a resume out of a pipelined stretch emits the
in-flight token plain first) over a bench run's recorded plain answers, every gate of a config
sharing one ``policy.learnt.Learnt`` from question to question as the bench's do. Loads the
tokenizer only (a packaged GGUF's converted directory), so a Qwen run's answers replay in seconds.
Deterministic, no timing: the run's own verify curve is the clock, a pipelined token ``--ratio``
of a one-token verify step.

    PYTHONPATH=. python3 lab/gate-start/default_replay.py --model qwen2.5-coder-0.5b \
        --results /work/qwen-pc1/results.json [--show translation-201] [--ratio 1.0 --ratio 0.9]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gate-live-lag"))

import lag_replay as L  # noqa: E402
from specdec.loader.api import resolve  # noqa: E402
from specdec.policy.gate import CostGate  # noqa: E402
from specdec.policy.learnt import Learnt  # noqa: E402


def tokenizer(model: str):
    """The model's tokenizer alone (no weights loaded)."""
    from mlx_lm.utils import load_tokenizer

    from specdec.loader.convert import convert_gguf

    kind, ref = resolve(model)
    path = convert_gguf(Path(ref)) if kind == "gguf" else Path(ref)
    return load_tokenizer(Path(path))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--results", action="append", required=True)
    ap.add_argument("--ratio", type=float, action="append")
    ap.add_argument("--show", action="append", default=[])
    args = ap.parse_args()
    tok = tokenizer(args.model)
    curve = {int(k): v for k, v in json.load(open(args.results[0]))["cost_curve"].items()}
    line = L.robust_line(curve, L.K + 1)
    by_q = defaultdict(list)
    for path in args.results:
        for q in L.turns(path, tok):
            by_q[q.name].append(q)
    for ratio in args.ratio or [1.0]:
        print(f"== a pipelined token = {ratio} one-token verify step (live, carried)")
        per = {}
        for name, cls in (("ungated", None), ("default", CostGate)):
            memory = Learnt() if cls else None
            rows = [r for qs in by_q.values()
                    for r in L.run(qs, tok, curve, line, cls, cls is not None, True, ratio, memory)]
            per[name] = L.summary(name, rows, line, ratio)
            for r in rows:
                if r["name"] in args.show:
                    print(f"    {r['name']} t{r['turn']}:", " ".join(r["steps"]))
        print("per question, speed / accepted: ungated / default")
        for q in per["ungated"]:
            print(f"  {q:20s}", "  ".join(f"{per[n][q][1]:.3f}/{per[n][q][0]:<3d}" for n in per))


if __name__ == "__main__":
    main()
