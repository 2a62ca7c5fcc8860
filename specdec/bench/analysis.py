"""From raw bench run records to the numbers the report prints. Pure functions, no model.

Contract: ``summarize`` gives one row per (case, config): median decode tok/s (measured runs
only), speedup against the same source's plain runs, acceptance, the oracle fraction, the
zero-cost bound (verify steps priced by the cost curve, drafting free) and the drafter-cost
bound; ``parity`` compares every measured run with every plain run token by token;
``per_position``, ``class_summary`` and ``bounds`` aggregate.
Tests: tests/bench/test_analysis.py, tests/bench/test_runner.py, tests/test_measure.py. The
formulas with worked examples:
docs/bench.md#analysis."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

from ..policy.adaptive import draft_seconds
from ..policy.tree_shape import cost_at

PLAIN_LABEL = "plain"
ORACLE_PREFIX = "oracle"


def baseline_label(row_config: str, source: str) -> str:
    return PLAIN_LABEL if source == "specdec" else f"{source}: plain"


def zero_cost(steps: Iterable[Sequence[int]], generated: int, cost: Mapping[int, float]) -> float:
    """Speedup of these verify steps at zero drafting cost (docs/bench.md#analysis); 1.0 for
    plain decoding."""
    c1 = cost[1]
    units = sum(cost_at(cost, L) / c1 for L, _ in steps)
    return generated / units if units else 0.0


def with_draft_cost(steps: Iterable[Sequence[int]], generated: int, cost: Mapping[int, float],
                    draft_cost: Mapping[str, float] | None) -> float:
    """Speedup of these verify steps when each also pays the drafter's own cost for its
    L - 1 drafted tokens (docs/bench.md#analysis); ``zero_cost`` when ``draft_cost`` is None.

    >>> round(with_draft_cost([(5, 4), (5, 1)], 7, {1: 1.0, 5: 1.4},
    ...                       {"fixed": 0.1, "per_token": 0.05}), 2)
    2.06
    """
    c1 = cost[1]
    units = sum((cost_at(cost, L) + draft_seconds(draft_cost, L - 1)) / c1 for L, _ in steps)
    return generated / units if units else 0.0


def _runs(records: Iterable[Any]) -> dict[tuple, dict[int, list[Any]]]:
    """(workload, length, config, source) -> {run: [turn records]} for measured runs."""
    out: dict[tuple, dict[int, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["run"] >= 1:
            out[(r["workload"], r["length"], r["config"], r["source"])][r["run"]].append(r)
    return out


def _tok_s(turns: list[dict]) -> float:
    dec = sum(t["decode_s"] for t in turns)
    return sum(t["generated"] for t in turns) / dec if dec > 0 else 0.0


def summarize(records: Sequence[dict], cost: Mapping[int, float],
              draft_costs: Mapping[str, Mapping[str, float]] | None = None) -> list[dict]:
    """Rows per (case, config); ``draft_costs``: config label -> the drafter's measured cost
    model, for the drafter-cost bound (docs/bench.md#analysis)."""
    runs = _runs(records)
    medians = {key: statistics.median(_tok_s(t) for t in by_run.values())
               for key, by_run in runs.items()}
    rows = []
    for (wl, length, config, source), by_run in runs.items():
        turns = [t for ts in by_run.values() for t in ts]
        speeds = [_tok_s(t) for t in by_run.values()]
        base = medians.get((wl, length, baseline_label(config, source), source))
        drafted = sum(t["drafted"] for t in turns)
        steps = sum(t["verify_steps"] for t in turns)
        accepted = sum(t["accepted"] for t in turns)
        fed = sum(t["fed_tokens"] for t in turns)
        generated = sum(t["generated"] for t in turns)
        # Spec-Bench's tokens per forward: every emitted token (an ending EOS too) / forwards
        emitted = sum(t["emitted"] for t in turns) if all("emitted" in t for t in turns) else None
        all_steps = [s for t in turns for s in t["steps"]]
        bound = zero_cost(all_steps, generated, cost) if source == "specdec" and steps else None
        dc = (draft_costs or {}).get(config)
        draft_bound = with_draft_cost(all_steps, generated, cost, dc) if bound and dc else None
        speedup = medians[(wl, length, config, source)] / base if base else None
        rows.append(dict(
            workload=wl, cls=turns[0]["cls"], length=length,
            prompt_tokens=turns[0]["prompt_tokens"], config=config, source=source,
            runs=len(by_run), tok_s=medians[(wl, length, config, source)],
            tok_s_min=min(speeds), tok_s_max=max(speeds),
            ttft_s=statistics.median(ts[0]["prefill_s"] for ts in by_run.values()),
            speedup=speedup, acceptance=accepted / drafted if drafted else None,
            mal=(accepted + steps) / steps if steps else None,
            emitted=emitted, forwards=steps,
            tpf=emitted / steps if emitted is not None and steps else None,
            p_cache=(generated if emitted is None else emitted) / fed if fed else None, zero_cost=bound,
            draft_bound=draft_bound,
            engine_eff=speedup / bound if speedup and bound else None,
        ))
    return _with_oracle(rows)


def _with_oracle(rows: list[dict]) -> list[dict]:
    """Add each case's oracle (best oracle-config speedup) and each row's fraction of it."""
    best: dict[tuple, float] = {}
    for r in rows:
        if r["config"].startswith(ORACLE_PREFIX) and r["speedup"]:
            key = (r["workload"], r["length"])
            best[key] = max(best.get(key, 0.0), r["speedup"])
    for r in rows:
        o = best.get((r["workload"], r["length"])) if r["source"] == "specdec" else None
        r["oracle"] = o
        r["of_oracle"] = r["speedup"] / o if o and r["speedup"] else None
    return rows


def parity(records: Sequence[dict]) -> list[dict]:
    """One row per (case, turn, config): N×N comparisons against plain, and mismatches."""
    groups: dict[tuple, dict[str, list[list[int]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["run"] >= 1:
            key = (r["workload"], r["length"], r["turn"], r["source"])
            groups[key][r["config"]].append(r["tokens"])
    rows = []
    for (wl, length, turn, source), by_cfg in groups.items():
        base = by_cfg.get(baseline_label("", source), [])
        for config, runs in by_cfg.items():
            pairs = [(a, b) for a in runs for b in base]
            bad = [(i, j) for i, a in enumerate(runs) for j, b in enumerate(base) if a != b]
            first = None
            if bad:
                a, b = runs[bad[0][0]], base[bad[0][1]]
                first = next((p for p in range(min(len(a), len(b))) if a[p] != b[p]),
                             min(len(a), len(b)))
            rows.append(dict(workload=wl, length=length, turn=turn, config=config,
                             source=source, comparisons=len(pairs), mismatches=len(bad),
                             first_divergence=first))
    return rows


def per_position(records: Sequence[dict]) -> dict[str, list[float]]:
    """config -> acceptance of draft slot 1, 2, ... over all measured runs."""
    drafted: dict[str, list[int]] = defaultdict(list)
    accepted: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if r["run"] < 1 or r["source"] != "specdec":
            continue
        d, a = drafted[r["config"]], accepted[r["config"]]
        for i, (x, y) in enumerate(zip(r["drafted_by_position"], r["accepted_by_position"])):
            if i >= len(d):
                d.append(0)
                a.append(0)
            d[i] += x
            a[i] += y
    return {c: [a / d if d else 0.0 for a, d in zip(accepted[c], drafted[c])]
            for c in drafted if drafted[c]}


def geomean(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def class_summary(rows: Sequence[dict]) -> list[dict]:
    """Geometric-mean speedup, zero-cost and drafter-cost bounds, engine efficiency and
    fraction of the oracle per (class, config, source); mean acceptance and tokens per
    verify step (MAL: the modelled speedup under a flat cost curve)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if not r["config"].endswith(PLAIN_LABEL):  # a baseline is 1.0× by definition
            groups[(r["cls"], r["config"], r["source"])].append(r)
    return [dict(cls=c, config=cfg, source=src, cases=len(rs),
                 speedup=geomean(r["speedup"] for r in rs),
                 zero_cost=geomean(r["zero_cost"] for r in rs if r["zero_cost"]),
                 draft_bound=geomean(r["draft_bound"] for r in rs if r.get("draft_bound")),
                 engine_eff=geomean(r["engine_eff"] for r in rs if r["engine_eff"]),
                 of_oracle=geomean(r["of_oracle"] for r in rs if r["of_oracle"]),
                 acceptance=mean_of(r["acceptance"] for r in rs),
                 mal=mean_of(r.get("mal") for r in rs), tpf=tokens_per_forward(rs))
            for (c, cfg, src), rs in groups.items()]


def tokens_per_forward(rows: Iterable[dict]) -> float | None:
    """Spec-Bench's figure over ``rows``: all their emitted tokens / all their forwards
    (None when a row has no count: a peer's, or a results.json from before it was kept)."""
    rows = list(rows)
    if not rows or any(r.get("emitted") is None or not r.get("forwards") for r in rows):
        return None
    return sum(r["emitted"] for r in rows) / sum(r["forwards"] for r in rows)


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None (None when there are none)."""
    xs = [v for v in values if v is not None]
    return statistics.mean(xs) if xs else None


def per_turn(records: Sequence[dict]) -> list[dict]:
    """Multi-turn workloads: median tok/s and acceptance per (workload, length, config, turn),
    with the speedup over plain decoding on the same turn."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if r["run"] >= 1 and r["source"] == "specdec":
            groups[(r["workload"], r["length"], r["config"], r["turn"])].append(r)
    multi = {k[0] for k in groups if k[3] > 0}
    med = {k: statistics.median(r["generated"] / r["decode_s"] for r in rs if r["decode_s"] > 0)
           for k, rs in groups.items() if k[0] in multi}
    rows = []
    for (wl, length, cfg, turn), speed in med.items():
        rs = groups[(wl, length, cfg, turn)]
        drafted = sum(r["drafted"] for r in rs)
        base = med.get((wl, length, PLAIN_LABEL, turn))
        rows.append(dict(workload=wl, length=length, config=cfg, turn=turn, tok_s=speed,
                         speedup=speed / base if base else None,
                         acceptance=sum(r["accepted"] for r in rs) / drafted if drafted else None))
    return sorted(rows, key=lambda r: (r["workload"], r["length"] or 0, r["config"], r["turn"]))


def bounds(rows: Sequence[dict]) -> list[dict]:
    """Per (case, k): the replay bounds of ``oracle.replay_bound`` summed over turns —
    tokens per verify step, nodes verified per step, modelled speedup (measured cost
    curve) and speedup under a flat curve, for linear lookup and the all-matches tree."""
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        for strategy in ("linear", "all_matches"):
            groups[(r["workload"], r["length"], r["k"])][strategy].append(r[strategy])
    out = []
    for (wl, length, k), by in groups.items():
        row = dict(workload=wl, length=length, k=k)
        for strategy, parts in by.items():
            tok, steps = sum(p["tokens"] for p in parts), sum(p["steps"] for p in parts)
            units, nodes = sum(p["cost_units"] for p in parts), sum(p["nodes"] for p in parts)
            row[strategy] = dict(tokens_per_step=tok / steps if steps else 0.0,
                                 nodes_per_step=nodes / steps if steps else 0.0,
                                 speedup=tok / units if units else 0.0,
                                 speedup_flat=tok / steps if steps else 0.0)
        out.append(row)
    return out
