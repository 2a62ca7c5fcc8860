"""Is the cost gate's host work where the default loses time? Main-thread CPU per emitted token
(``time.thread_time``: this thread's CPU only, so other processes' load moves it less than wall time)
of plain decoding, the default (suffix k <= 8 under the gate) and suffix k = 8 ungated, SmolLM2-135M on
Spec-Bench questions (first turn, chat template, 128 tokens), each run twice; the second run is profiled
(cProfile on the same clock) and its CPU split by where the time is spent (``GROUPS``; the profiler's
own per-call overhead lands on the Python it wraps, so the gate's and drafter's shares read high).
Run from the repository root: nice -n 19 env PYTHONPATH=. python3 lab/gate-host-cost/host_cost.py [ids]
(Spec-Bench question ids; default 261, summarization)."""
import cProfile
import os
import pstats
import sys
import time

import specdec
from specdec.bench.specbench import questions
from specdec.drafters.spec import DraftSpec

CONFIGS = {"plain": DraftSpec("none"), "default": DraftSpec(), "ungated": DraftSpec("suffix", gate=False)}
# (label, test on a profile entry's (file, function)); the first that matches counts it
GROUPS = (("gate", lambda f, fn: "/specdec/policy/" in f),
          ("drafter", lambda f, fn: "/specdec/drafters/" in f),
          ("host sync", lambda f, fn: f.endswith("/specdec/decode/step.py") and fn == "_decide"),
          ("graph", lambda f, fn: "/mlx_lm/" in f or "/mlx/" in f),
          ("rest", lambda f, fn: True))


def shares(prof: cProfile.Profile) -> dict[str, float]:
    """Seconds of own time (tottime) per group of ``GROUPS``."""
    out = dict.fromkeys([label for label, _ in GROUPS], 0.0)
    for (f, _, fn), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        out[next(label for label, test in GROUPS if test(f, fn))] += tottime
    return out


def main(ids: list[int]) -> None:
    model, tok = specdec.load("smollm2-135m")
    print(f"# load average {os.getloadavg()[0]:.1f} at start, {os.cpu_count()} CPUs", flush=True)
    for q in [q for q in questions() if q.question_id in ids]:
        msgs = [{"role": "user", "content": q.turns[0]}]
        for name, spec in CONFIGS.items():
            for rep in range(2):
                prof = cProfile.Profile(time.thread_time) if rep else None
                t0, c0 = time.perf_counter(), time.thread_time()
                if prof:
                    prof.enable()
                r = specdec.generate(model, tok, msgs, max_tokens=128, drafter=spec)
                if prof:
                    prof.disable()
                wall, cpu, n = time.perf_counter() - t0, time.thread_time() - c0, len(r.tokens)
                line = (f"q{q.question_id} {q.category} {name} run{rep} tokens={n} "
                        f"tpf={r.stats.mean_acceptance_length:.2f} wall={wall:.1f}s main_cpu={cpu:.2f}s "
                        f"cpu/token={1e3 * cpu / n:.1f}ms")
                if prof:
                    split = shares(prof)
                    total = sum(split.values())
                    line += " | " + " ".join(f"{k} {1e3 * v:.0f}ms ({100 * v / total:.1f}%)"
                                             for k, v in split.items())
                print(line, flush=True)
    print(f"# load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [261])
