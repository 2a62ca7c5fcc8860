"""Issue #46: a ``--trace`` run's step costs as a clock: per config, the median observed seconds of each
block length L (``P``: a pipelined plain token) over the median one-token verify step, measured runs only.

    python3 lab/specbench/engine-clock/trace_clock.py TRACE.jsonl
"""
import collections
import json
import statistics
import sys


def main() -> None:
    by = collections.defaultdict(list)
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r.get("run", 0) >= 1 and r.get("observed_s"):
            by[(r["config"], "P" if r.get("plain") else r["fed"])].append(r["observed_s"])
    for config in sorted({c for c, _ in by}):
        one = statistics.median(by[(config, 1)])
        lengths = sorted((L for c, L in by if c == config), key=lambda L: -1 if L == "P" else L)
        print(config, f"(one-token step {one * 1e3:.1f} ms; n by L:",
              " ".join(f"{L}:{len(by[(config, L)])}" for L in lengths) + ")")
        print(json.dumps({str(L): round(statistics.median(by[(config, L)]) / one, 2) for L in lengths}))


if __name__ == "__main__":
    main()
