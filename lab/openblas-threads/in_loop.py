"""In the real loop: does a per-length OpenBLAS thread plan (thread-plan.patch) speed up decoding?

Needs a checkout with ``thread-plan.patch`` applied (``specdec.core.blas``). One process, SmolLM2-135M
fp32, greedy, 160 tokens of three prompts, suffix k = 8 gated: plain, speculative under the plan
measured for the model (``measure.blas_thread_plan``) and speculative under an empty plan,
interleaved over ``ROUNDS`` rounds; prints each round's seconds and the medians, and whether every
run's tokens are equal. Run: ``PYTHONPATH=CHECKOUT python lab/openblas-threads/in_loop.py``.
"""

import os
import sys
import time

from specdec.backend import openblas_path, openblas_preloaded, preload_env

if openblas_path() and not openblas_preloaded() and not os.environ.get("INLOOP_REEXEC"):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**preload_env(), "INLOOP_REEXEC": "1"})
import specdec  # noqa: E402
from specdec.core import blas  # noqa: E402  (thread-plan.patch)

ROUNDS = 5
PROMPTS = [
    "Write a Python function that checks whether a number is prime, then explain it line by line.",
    "Summarize the plot of Romeo and Juliet in five sentences, then list its main characters.",
    "Translate to French: The weather is nice today, so we will walk to the market and buy bread.",
]


def main() -> None:
    model, tok = specdec.load("smollm2-135m")
    spec = specdec.DraftSpec("suffix", num_draft_tokens=8)

    def run(drafter) -> tuple[float, list]:
        t, out = time.perf_counter(), []
        for p in PROMPTS:
            out.append(specdec.generate(model, tok, p, max_tokens=160, drafter=drafter).tokens)
        return time.perf_counter() - t, out

    run(None), run(spec)  # warm-up; measures and registers the plan
    plan = blas.plan_of(model)
    print("plan:", sorted(plan.one_thread) if plan else None, flush=True)
    secs, outs = {}, {}
    for rnd in range(ROUNDS):
        for label in ("plain", "plan", "no plan"):
            blas.register(model, plan if label == "plan" else blas.ThreadPlan())
            s, out = run(None if label == "plain" else spec)
            secs.setdefault(label, []).append(s)
            outs.setdefault(label, []).append(out)
        print(rnd, {k: round(v[-1], 2) for k, v in secs.items()}, flush=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in secs.items()}
    print("medians s:", {k: round(v, 2) for k, v in med.items()},
          f"plan / no plan {med['plan'] / med['no plan']:.3f}, no plan / plain {med['no plan'] / med['plain']:.3f}")
    print("every run's tokens equal:", all(o == outs["plain"][0] for v in outs.values() for o in v))


if __name__ == "__main__":
    main()
