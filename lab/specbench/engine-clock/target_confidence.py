"""Issue #46: the target's own confidence in the last token, per answer position (teacher-forced).

For every turn of the recorded answers: one forward over prompt + answer, and at each answer
position i the log-probability the target gave the token it emitted there and the margin between
its top two log-probabilities. Written as JSON {question|turn: [[logprob, margin], ...]} for
``features.py --confidence FILE``.

    PYTHONPATH=. python3 lab/specbench/engine-clock/target_confidence.py --results R.json --out FILE
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[2] / "gate-acceptance"))

import mlx.core as mx  # noqa: E402
import specdec  # noqa: E402
from calibration import turns  # noqa: E402
from replay import full_results  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", action="append", default=[])
    ap.add_argument("--records", action="append", default=[])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    out = {}
    for path in args.results + [full_results(p) for p in args.records]:
        for q in turns(path, tok):
            ids = q.prompt + q.out
            logits = model(mx.array(ids)[None])[0, len(q.prompt) - 1:len(ids) - 1]
            lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            top2 = mx.sort(lp, axis=-1)[:, -2:]
            mine = mx.take_along_axis(lp, mx.array(q.out)[:, None], axis=-1)[:, 0]
            margin = top2[:, 1] - top2[:, 0]
            out[f"{q.name}|{q.turn}"] = [[round(a, 4), round(b, 4)] for a, b in zip(mine.tolist(), margin.tolist())]
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
