"""Choose the default drafter: every bench workload decoded with each candidate, priced on
one verify cost curve, so the comparison is free of this machine's noise.

    python lab/default-drafter-choice/gate_replay.py                         # SmolLM2, this CPU's curve shape
    python lab/default-drafter-choice/gate_replay.py --model qwen2.5-coder-0.5b --max-tokens 96
    python lab/default-drafter-choice/gate_replay.py --slope 0.01            # a flat (Metal/CUDA-like) curve
    python lab/default-drafter-choice/gate_replay.py --only "suffix k=8"     # the default alone

Each workload's first turn (prompt fitted to ``--prompt-tokens``, greedy) is decoded once
plainly and once per candidate; every candidate's tokens must equal plain decoding's. A
candidate's time is priced from its step log: a verify step of L tokens costs
``cost(L) + overhead`` (``overhead``: a verify step's host work and sync, in units of
cost(1)), a token decoded plain and pipelined while the cost gate is paused costs
``cost(1)``, and plain decoding costs ``cost(1)`` per forward (an EOS included).
``cost(L) = 1 + slope (L - 1)``; the default slope 0.1 is this 2-core CPU's measured
shape for SmolLM2 (cost(5) ~ 1.4, cost(17) ~ 2.6). The cost gate runs untimed
(``timed=False``) so its choices follow the curve alone and the run repeats exactly.

Prints each workload's modeled speedup per candidate, then per candidate the minimum, the
echo-heavy geometric mean (every class but open-ended) and the open-ended cases; ``--out``
writes them as JSON. Candidates: ngram and suffix, ungated at k = 4 (the old default)
and gated at k = 4 and 8.
"""

from __future__ import annotations

import argparse
import json
import math

from specdec.bench.workloads import builtin_workloads, fit_prompt
from specdec.policy.gate import CostGate
from specdec.drafters.ngram import NgramDrafter
from specdec.drafters.suffix import SuffixDrafter
from specdec.engine import token_stream
from specdec.loader import load


class Counting(CostGate):
    """The cost gate, counting the tokens decoded plain while it was paused."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.watched = 0

    def watch(self, context):
        self.watched += 1
        super().watch(context)


def candidates(eos: frozenset, curve: dict) -> dict:
    inner = {"ngram": lambda: NgramDrafter(1, 3, eos=eos), "suffix": lambda: SuffixDrafter(eos=eos)}
    out = {}
    for name, make in inner.items():
        out[f"{name} k=4 nogate"] = (make, 4)
        for k in (4, 8):
            out[f"{name} k={k}"] = (lambda make=make, k=k: Counting(make(), curve, k, timed=False), k)
    return out


def modeled(model, ids, make, k, eos, max_tokens, curve, overhead):
    """(tokens, modeled seconds in units of cost(1))."""
    drafter, log = make(), []
    out = [e.token for e in token_stream(model, ids, drafter=drafter, max_tokens=max_tokens,
                                         num_draft_tokens=k, eos=eos, step_log=log)]
    plain = getattr(drafter, "watched", 0)  # the steps of plain stretches: one token each
    verify = log[:len(log) - plain] if plain else log
    return out, plain * curve[1] + sum(curve[L] + overhead for L, _ in verify)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt-tokens", type=int, default=400)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--slope", type=float, default=0.1, help="cost(L) = 1 + slope (L - 1)")
    ap.add_argument("--overhead", type=float, default=0.05, help="a verify step's host work, x cost(1)")
    ap.add_argument("--only", help="comma-separated candidate labels to run (default: all)")
    ap.add_argument("--out", help="write the speedups as JSON")
    args = ap.parse_args()
    model, tok = load(args.model)
    eos = frozenset(tok.eos_token_ids)
    curve = {L: 1.0 + args.slope * (L - 1) for L in range(1, 34)}
    cands = candidates(eos, curve)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(cands))
        if unknown:
            raise SystemExit(f"unknown candidates {unknown}; choose from {sorted(cands)}")
        cands = {label: cands[label] for label in wanted}
    rows = {}
    for w in builtin_workloads():
        if w.tools or w.response_format:
            continue  # the agent and structured classes need a grammar: measured by `specdec bench`
        ids = fit_prompt(tok, w, args.prompt_tokens).encode(tok)
        ref, _ = modeled(model, ids, lambda: None, 4, eos, args.max_tokens, curve, args.overhead)
        base = (len(ref) + (len(ref) < args.max_tokens)) * curve[1]  # an EOS is a forward too
        speed = {}
        for label, (make, k) in cands.items():
            out, t = modeled(model, ids, make, k, eos, args.max_tokens, curve, args.overhead)
            if out != ref:
                raise SystemExit(f"{w.name} {label}: tokens differ from plain decoding")
            speed[label] = round(base / t, 3)
        rows[w.name] = {"class": w.cls, **speed}
        print(w.name, w.cls, speed, flush=True)
    summary = {}
    for label in cands:
        vals = {n: r[label] for n, r in rows.items()}
        echo = [v for n, v in vals.items() if rows[n]["class"] != "open_ended"]
        summary[label] = {"min": min(vals.values()),
                          "echo_geomean": round(math.exp(sum(map(math.log, echo)) / len(echo)), 3),
                          "open_ended": [v for n, v in vals.items() if rows[n]["class"] == "open_ended"]}
        print(f"{label:18s} {summary[label]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "workloads": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
