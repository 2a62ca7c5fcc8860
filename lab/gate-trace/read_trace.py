"""Print a `--trace FILE` (specdec generate / bench) one line per decode step, grouped by request.

    python3 lab/gate-trace/read_trace.py TRACE.jsonl [--case translation-181]

Columns: step; P (a pipelined plain step: no verify forward of its own) or V (a verify step);
k drafted and accepted; emitted; observed ms against the gate's predicted ms and expected
tokens (ungated configs: no price); what the gate knew before the step (paused, the last offer's
length, the pipelined token's price plain_s); a shadow guess made; paused after. Then each
request's steps, tokens and tokens per forward (emitted / verify steps, as the bench counts)."""

import argparse
import json
from itertools import groupby


def fmt(r: dict) -> str:
    b = r["before"]
    price = (f"pred {1000 * r['predicted_s']:5.0f} ms exp {r['expected']:.2f}"
             if r.get("predicted_s") is not None else " " * 23)
    gate = (f"{'paused' if b['paused'] else 'live  '} offer {b['offer']} plain_s "
            f"{1000 * b['plain_s']:.0f} ms" if b.get("plain_s") is not None else "")
    return (f"{r['step']:4d} {'P' if r['plain'] else 'V'} k {r['k']} acc {r['accepted']} "
            f"emit {r['emitted']}  obs {1000 * r['observed_s']:5.0f} ms  {price}  {gate}"
            f"{'  shadow ' + str(r['shadow']) if r['shadow'] else ''}"
            f"{'  -> paused' if r['paused_after'] else ''}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--case", help="only this bench case (e.g. translation-181)")
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.trace, encoding="utf-8")]
    rows = [r for r in rows if not args.case or r.get("case") == args.case]
    key = lambda r: (r.get("config", ""), r.get("case", ""), r.get("run", ""), r["request"])  # noqa: E731
    for (config, case, run, request), steps in groupby(rows, key):
        steps = list(steps)
        print(f"== {config} {case} run {run} request {request}")
        for r in steps:
            print(fmt(r))
        tokens = sum(r["emitted"] for r in steps)
        verify = sum(not r["plain"] for r in steps)
        print(f"   {len(steps)} steps ({verify} verify), {tokens} tokens, "
              f"{tokens / max(len(steps), 1):.2f} tokens per forward")


if __name__ == "__main__":
    main()
