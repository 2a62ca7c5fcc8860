"""Issue #46 item 2: the cost gate on Spec-Bench questions, traced.

Runs plain, the default (suffix k <= 8, gated) and the same drafter ungated (k = 8) on a
stratified subset of Spec-Bench's questions (first turn, chat template, greedy), interleaved
within each repetition (the order rotates), and writes per-question medians of the speedup
over plain and tokens per target forward (every emitted token over target forwards after
prefill), plus the default's per-step trace (``specdec.decode.trace``).

    PYTHONPATH=. python3 lab/gate-trace/gate_trace.py /work/briefs/specbench/question.jsonl \
        --per 4 --reps 3 --out lab/gate-trace
Also ``--random``: one prompt whose answer shares nothing with its context (the gate must
not lose to plain there). Result: lab/gate-trace/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections import defaultdict
from pathlib import Path

import specdec
from specdec.decode.trace import tracing
from specdec.drafters.spec import DraftSpec
from specdec.engine import generate
from specdec.resources import drafter_for

GROUPS = {"writing": "mt_bench", "roleplay": "mt_bench", "reasoning": "mt_bench", "math": "mt_bench",
          "coding": "mt_bench", "extraction": "mt_bench", "stem": "mt_bench", "humanities": "mt_bench"}
CONFIGS = {"plain": None, "default": DraftSpec(), "ungated": DraftSpec(gate=False)}
BEFORE = None  # --before DIR: also run the cost gate of another checkout (e.g. /work/main)


def old_gate(model, tok, where: str):
    """The default drafter with ``where``'s CostGate (module loaded from that checkout, its
    curve as measured): the policy before a change, in the same interleaved run."""
    import importlib.util

    package = "policy" if os.path.exists(f"{where}/specdec/policy/gate.py") else "drafters"  # moved: #45
    spec = importlib.util.spec_from_file_location(f"specdec.{package}._gate_before",
                                                  f"{where}/specdec/{package}/gate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    gate = drafter_for(DraftSpec(), model, tok)
    old = mod.CostGate(gate.inner, gate.cost, gate.k_max, draft_cost=gate.draft_cost)
    old.cost = dict(raw_curve(model))  # as it priced: the curve as measured
    old.draft_cost = gate.draft_cost
    return old


def raw_curve(model):
    from specdec.measure import cost_curve_for

    return cost_curve_for(model, DraftSpec().num_draft_tokens + 1)


def pick(path: str, per: int) -> list[dict]:
    """``per`` questions of each Spec-Bench group (MT-bench: the first of ``per`` categories)."""
    qs = [json.loads(line) for line in open(path, encoding="utf-8")]
    out, seen = [], defaultdict(int)
    mt_cats: set[str] = set()
    for q in qs:
        group = GROUPS.get(q["category"], q["category"])
        if group == "mt_bench":
            if q["category"] in mt_cats or len(mt_cats) >= per:
                continue
            mt_cats.add(q["category"])
        if seen[group] < per:
            seen[group] += 1
            out.append({**q, "group": group})
    return out


def random_prompt(tok, n: int = 60, seed: int = 0) -> dict:
    """A request to copy nothing: random words in, an answer about something else out."""
    rng = random.Random(seed)
    vocab = [w for w in ("alpha", "kettle", "zinc", "marble", "orbit", "fjord", "quill", "plume",
                         "cobalt", "lantern", "saffron", "tundra", "violet", "walnut", "yarrow")]
    words = " ".join(rng.choice(vocab) for _ in range(n))
    return {"question_id": "random", "category": "random", "group": "random",
            "turns": [f"Ignore these words: {words}. Now count from one to forty in French, "
                      "one number per line, spelled out."]}


def run(model, tok, q: dict, name: str, max_tokens: int) -> dict:
    if name == "before":
        drafter = old_gate(model, tok, BEFORE)
    else:
        drafter = drafter_for(CONFIGS[name], model, tok) if CONFIGS[name] else None
    t0 = time.perf_counter()
    res = generate(model, tok, [{"role": "user", "content": q["turns"][0]}], drafter=drafter,
                   max_tokens=max_tokens, num_draft_tokens=8)
    s = res.stats
    return {"tokens": res.tokens, "decode_s": s.decode_s, "wall_s": time.perf_counter() - t0,
            "forwards": s.verify_steps, "accepted": s.accepted}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("questions")
    ap.add_argument("--per", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--random", action="store_true", help="add the prompt with nothing to copy")
    ap.add_argument("--only", help="comma list of question ids")
    ap.add_argument("--out", default="lab/gate-trace")
    ap.add_argument("--before", help="a checkout whose CostGate also runs, as 'before'")
    args = ap.parse_args()
    global BEFORE
    BEFORE = args.before
    model, tok = specdec.load("smollm2-135m", dtype="float32")
    qs = pick(args.questions, args.per) + ([random_prompt(tok)] if args.random else [])
    if args.only:
        keep = set(args.only.split(","))
        qs = [q for q in qs if str(q["question_id"]) in keep]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs: dict = defaultdict(list)
    names = list(CONFIGS) + (["before"] if args.before else [])
    run(model, tok, qs[0], "default", 16)  # warm-up: compile, load the cost curve
    with tracing(str(out / "trace.jsonl")) as tracer:
        for rep in range(args.reps):
            for i, q in enumerate(qs):
                turn = (rep + i) % len(names)
                for name in names[turn:] + names[:turn]:
                    tracer.tag(config=name, question=q["question_id"], rep=rep)
                    runs[(q["question_id"], name)].append(run(model, tok, q, name, args.max_tokens))
            rows = summarise(qs, runs, names[1:])  # after every repetition: a partial run reads
            (out / "results.json").write_text(json.dumps(rows, indent=1))
    report(rows, names[1:])


def summarise(qs: list[dict], runs: dict, names: list[str]) -> list[dict]:
    rows = []
    for q in qs:
        plain = runs[(q["question_id"], "plain")]
        row = {"id": q["question_id"], "group": q["group"], "tokens": len(plain[0]["tokens"]),
               "reps": len(plain)}
        for name in names:
            rs = runs[(q["question_id"], name)]
            row[f"{name}_x"] = statistics.median(p["decode_s"] / r["decode_s"] for p, r in zip(plain, rs))
            row[f"{name}_tpf"] = len(rs[0]["tokens"]) / max(rs[0]["forwards"], 1)
            row[f"{name}_same"] = all(r["tokens"] == plain[0]["tokens"] for r in rs)
        rows.append(row)
    return rows


def report(rows: list[dict], names: list[str]) -> None:
    """Per question the median speedup over plain (x) and tokens per forward (tpf)."""
    print(f"{'id':>7} {'group':15} {'tok':>4} " + " ".join(f"{n:>8} {'tpf':>5}" for n in names))
    for r in rows:
        print(f"{r['id']!s:>7} {r['group']:15} {r['tokens']:4d} "
              + " ".join(f"{r[f'{n}_x']:8.2f} {r[f'{n}_tpf']:5.2f}" for n in names)
              + ("" if all(r[f"{n}_same"] for n in names) else "  DIFFERENT"))
    for g in sorted({r["group"] for r in rows}) + ["all"]:
        sel = [r for r in rows if g == "all" or r["group"] == g]
        print(f"{g:15} " + "  ".join(
            f"{n} {statistics.geometric_mean(r[f'{n}_x'] for r in sel):.2f}x "
            f"{statistics.mean(r[f'{n}_tpf'] for r in sel):.2f}" for n in names))
    for n in [m for m in names if m != "ungated"]:
        lose = sum(r[f"{n}_x"] < r["ungated_x"] for r in rows)
        low = [r["id"] for r in rows if r[f"{n}_x"] < 0.97]
        print(f"{n}: slower than ungated on {lose} of {len(rows)}; below 0.97x plain: {low}")


if __name__ == "__main__":
    main()
