"""``specdec bench`` with the verify cost curve of a quiet run (``--curve RESULTS``) instead of one measured
now: on a machine shared with other jobs the curve measured at the start reads 3x slow and not monotone
(this session: cost(1) 0.20 s, cost(3) 1.05 s, cost(9) 0.55 s, quiet 0.065 / 0.084 / 0.120), and every gate
prices on it for the whole run, so its tokens per forward say nothing of the policy. Step times are still
live (the gate's scale follows the load). Lab only.

    PYTHONPATH=. python3 lab/gate-start/bench_quiet_curve.py --curve lab/specbench/quick/results.json \
        bench --profile specbench --quick --runs 1 --no-warmup --out DIR
"""

from __future__ import annotations

import json
import sys

from specdec.bench import runner
from specdec.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    i = args.index("--curve")
    path = args.pop(i + 1)
    args.pop(i)
    quiet = {int(k): v for k, v in json.load(open(path))["cost_curve"].items()}
    runner._cost_curve = lambda plan, model, tok, cases: dict(quiet)  # noqa: SLF001 (lab patch)
    sys.exit(main(args))
