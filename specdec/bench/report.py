"""Write a benchmark's results: ``results.json`` (every raw measurement), ``report.md``
and PNG plots.

Contract: ``write_report(result, out_dir)`` writes the three and returns the report's
path. The JSON holds the plan, the machine, the cost curve, every run record (warm-ups
included, marked ``run: 0``), the summaries and the parity diagnoses, so any number in
the report can be recomputed from it. ``headline(summary)`` gives the numbers a closing
note quotes: geometric-mean speedup on the echo-heavy classes, the open-ended ratio,
the fraction of the oracle, engine efficiency, and each peer's speedup. With a draft
model, ``pair_table(summary)`` lines up our ``model k=K`` configs with mlx-lm's
draft-model speculation at the same k (the README's pair table).
Tests: tests/bench/test_report.py, tests/bench/test_runner.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from ..drafters.spec import DraftSpec
from . import analysis, plots, specbench
from .configs import BenchConfig
from .workloads import ECHO_CLASSES

DEFAULT_LABEL = BenchConfig(DraftSpec()).label  # the engine's default drafter, as a config


def build_summary(result: Any) -> dict:
    records = [r.to_dict() for r in result.records]
    rows = analysis.summarize(records, result.cost_curve, getattr(result, "draft_costs", None))
    out = dict(rows=rows, classes=analysis.class_summary(rows),
               parity=analysis.parity(records), per_position=analysis.per_position(records),
               per_turn=analysis.per_turn(records), bounds=analysis.bounds(result.bounds))
    if specbench.is_specbench(r["cls"] for r in rows):
        out["specbench"] = specbench.category_table(rows)
    return out


def headline(summary: dict) -> dict:
    """Per config of ours: geomean speedup over echo-heavy cases, over open-ended cases,
    geomean fraction of the oracle (all cases) and engine efficiency; per peer config:
    geomean speedup over its own baseline."""
    out: dict[str, dict] = {}
    for r in summary["rows"]:
        if r["config"].endswith("plain"):
            continue
        d = out.setdefault(r["config"], dict(source=r["source"], echo=[], open=[], eff=[], orc=[]))
        (d["echo"] if r["cls"] in ECHO_CLASSES else d["open"]).append(r["speedup"])
        d["eff"] += [r["engine_eff"]] if r.get("engine_eff") else []
        d["orc"] += [r["of_oracle"]] if r.get("of_oracle") else []
    return {c: dict(source=d["source"], echo_speedup=analysis.geomean(d["echo"]),
                    open_speedup=analysis.geomean(d["open"]),
                    of_oracle=analysis.geomean(d["orc"]),
                    engine_eff=analysis.geomean(d["eff"])) for c, d in out.items()}


_MODEL_K = re.compile(r"^model k=(\d+)(?: nogate)?$")  # a linear draft-model config of ours
_K_SUFFIX = re.compile(r" k=(\d+)$")  # a peer's speculative label ends with its k
PAIR_PEER = "mlx-lm"


def _pair_cell(rows: list[dict]) -> dict | None:
    """One config over the cases it ran: geomean tok/s and speedup (as the class tables),
    mean acceptance and mean acceptance length."""
    if not rows:
        return None
    return dict(cases=len(rows), tok_s=analysis.geomean(r["tok_s"] for r in rows),
                speedup=analysis.geomean(r["speedup"] for r in rows),
                acceptance=analysis.mean_of(r.get("acceptance") for r in rows),
                mal=analysis.mean_of(r.get("mal") for r in rows))


def pair_table(summary: dict) -> list[dict]:
    """Our draft-model configs beside mlx-lm's draft model, aggregated over cases.

    One row for plain decoding (each engine's own), one per k where either engine ran a
    linear draft model at that k (``model k=K`` and ``mlx-lm: ... k=K``), then every other
    config of ours (token trees, chains) with its k. Each row: ``ours``, ``peer`` (a
    ``_pair_cell`` or None) and ``oracle`` (the oracle's geomean speedup at that k)."""
    ours: dict[str, list[dict]] = {}
    peer: dict[int, list[dict]] = {}
    for r in summary["rows"]:
        if r["source"] == "specdec":
            ours.setdefault(r["config"], []).append(r)
        elif r["source"] == PAIR_PEER and (m := _K_SUFFIX.search(r["config"])):
            peer.setdefault(int(m.group(1)), []).append(r)
    peer_plain = [r for r in summary["rows"] if r["config"] == f"{PAIR_PEER}: plain"]

    def oracle(k: int | None) -> float | None:
        cell = _pair_cell(ours.get(f"{analysis.ORACLE_PREFIX} k={k}", []))
        return cell["speedup"] if cell else None

    linear = {int(m.group(1)): c for c in ours if (m := _MODEL_K.match(c))}
    out: list[dict[str, Any]] = [dict(config=analysis.PLAIN_LABEL, k=None, ours=_pair_cell(ours.get(analysis.PLAIN_LABEL, [])),
                peer=_pair_cell(peer_plain), oracle=None)]
    for k in sorted(set(linear) | set(peer)):
        out.append(dict(config=linear.get(k, f"model k={k}"), k=k,
                        ours=_pair_cell(ours.get(linear.get(k, ""), [])),
                        peer=_pair_cell(peer.get(k, [])), oracle=oracle(k)))
    for c, rows in ours.items():
        if c == analysis.PLAIN_LABEL or c.startswith(analysis.ORACLE_PREFIX) or c in linear.values():
            continue
        ck = int(m.group(1)) if (m := re.search(r"\bk=(\d+)", c)) else None
        out.append(dict(config=c, k=ck, ours=_pair_cell(rows), peer=None, oracle=oracle(ck)))
    return out


def _drafts_with_a_model(plan: dict) -> bool:
    """A draft model in the plan (``--draft-model`` also names an eagle head or an MTP
    checkpoint, which the pair table with mlx-lm's draft-model speculation is not about)."""
    return bool(plan.get("draft_model")) and any(
        "model" in c.split(":")[0].split(",") for c in plan.get("configs", []))


def _pair_section(result: Any, summary: dict) -> list[str]:
    if not _drafts_with_a_model(result.plan):
        return []
    rows = pair_table(summary)
    if len(rows) < 2:
        return []
    p = result.plan
    cases = max((r["ours"] or {}).get("cases", 0) for r in rows)
    lines = ["## Pair table", "",
             f"{p['model']} verifying drafts of {p['draft_model']}, ours beside {PAIR_PEER}'s "
             f"draft-model speculation at the same k in the same run; geometric mean over "
             f"{cases} case(s) ({', '.join(p['workloads'])}), up to {p['max_tokens']} tokens. "
             "Each engine's speedup is over its own plain decoding; *oracle at k*: the drafter "
             "that replays the plain output at that k (every draft accepted). Acceptance and "
             "mean acceptance length (tokens per verify step) are ours.", ""]

    def cells(c: dict | None, extra: bool) -> list[str]:
        if c is None:
            return ["–"] * (4 if extra else 2)
        head = [_x(c["tok_s"], "{:.2f}"), _x(c["speedup"])]
        return head + ([_pct(c["acceptance"]), _x(c["mal"], "{:.2f}")] if extra else [])

    lines += _table(["config", "ours tok/s", "ours speedup", "acceptance", "mean acceptance length",
                     "oracle at k", f"{PAIR_PEER} tok/s", f"{PAIR_PEER} speedup"],
                    [[r["config"], *cells(r["ours"], True), _x(r["oracle"]), *cells(r["peer"], False)]
                     for r in rows])
    return lines


def _specbench_section(result: Any, summary: dict) -> list[str]:
    """Spec-Bench's categories: ours per config (speedup · tokens per forward), overall,
    the questions that lost to plain; the leaderboard's published rows beside them."""
    table = summary.get("specbench")
    if not table:
        return []
    cats = [c for c in specbench.CATEGORIES if any(c in t for t in table.values())]
    counts = next(iter(table.values()))
    p = result.plan

    def cell(c: dict | None) -> str:
        if not c:
            return "–"
        return f"{_x(c['speedup'])} · {_x(c['tpf'], '{:.2f}')}"

    lines = ["## Spec-Bench", "",
             f"{counts['overall']['questions']} Spec-Bench questions ("
             + ", ".join(f"{counts[c]['questions']} {c}" for c in cats)
             + f"), every turn (MT-bench's second turn asked after the model's own first "
             f"answer, as Spec-Bench's harness does), up to {p['max_tokens']} tokens a turn, "
             f"greedy, {p['model']}. Each cell: geomean speedup over the category's questions "
             "(median tok/s of the runs ÷ plain's, interleaved) · tokens per forward, counted as "
             "the leaderboard counts its mean accepted tokens: every emitted token, an ending "
             "EOS included, over the target forwards after prefill (plain decoding: 1.00). "
             f"*lost*: questions below {specbench.SLOW_BELOW}× plain (the worst in brackets).", ""]
    lines += _table(["config", *(specbench.TITLES[c] for c in cats), "overall (geomean)", "lost"],
                    [[cfg + (" (the default)" if cfg == DEFAULT_LABEL else ""),
                      *(cell(t.get(c)) for c in cats), cell(t["overall"]),
                      f"{t['overall']['slow']} ({_x(t['overall']['worst'])})"]
                     for cfg, t in table.items()])
    lines += [f"Published figures (Spec-Bench's Leaderboard.md, {specbench.DEVICE}; "
              "7B–13B targets on a GPU, where verifying a block costs about one forward, so "
              "their speedups are not this machine's: tokens per forward compare more "
              "directly):", ""]
    lines += _table(["method", "model", *(specbench.TITLES[c] for c in specbench.CATEGORIES),
                     "mean accepted tokens", "overall"],
                    [[r.method, r.model, *(_x(v) for v in r.speedups), f"{r.mean_accepted:.2f}",
                      _x(r.overall)] for r in specbench.LEADERBOARD])
    return lines


def _x(v: float | None, fmt: str = "{:.2f}×") -> str:
    return "–" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def _header(result: Any) -> list[str]:
    """The report's title, machine, command and method paragraph."""
    p, m = result.plan, result.meta
    return [f"# specdec bench — {p['model']}", "",
             f"{m['date']} · {m['machine']}, {m['cpus']} CPUs, {m['device']} · "
             f"versions {json.dumps(m['versions'])}", "",
             f"Command: `{m['argv']}`", "",
             *([f"**Partial run**: {result.unfinished} of the plan's cases are not measured yet "
                "(stopped by `--max-questions`); every figure below is over the cases done. "
                "Run the same command with `--resume DIR` (this directory) to measure the rest.", ""]
               if getattr(result, "unfinished", 0) else []),
             *([f"The target is sharded over {p['distributed']} ranks of an mlx.distributed "
                "group (`--distributed`): plain and speculative decoding both pay the "
                "group's collectives on every forward, and so does the cost curve.", ""]
               if p.get("distributed") else []),
             f"Each config ran {'1 warm-up + ' if p.get('warmup', True) else ''}"
             f"{p['runs']} measured runs per case{'' if p.get('warmup', True) else ' (no warm-up)'}, configs "
             f"interleaved; up to {p['max_tokens']} tokens per turn, greedy. tok/s is decode "
             "speed (tokens after the first / time after prefill; the median, with the "
             "min–max spread); TTFT is separate. Speedup = median tok/s ÷ median tok/s of the "
             "same engine's plain decoding on the same case.", ""]


def _markdown(result: Any, summary: dict, plots: list[str]) -> str:
    lines = _header(result)
    lines += ["## Headline", ""]
    lines += ["*of oracle*: speedup ÷ the best speedup of the oracle drafter (replays the "
              "plain output, so every draft is accepted) on the same case — how much of what "
              "any drafter could reach this config gets. *engine efficiency*: speedup ÷ the "
              "zero-cost bound (the same verify steps with free drafting and bookkeeping) — "
              "the engine's overhead, not the drafter's quality.", ""]
    lines += _table(["config", "source", "echo-heavy speedup (geomean)", "open-ended",
                     "of oracle", "engine efficiency"],
                    [[c, h["source"], _x(h["echo_speedup"]), _x(h["open_speedup"]),
                      _pct(h["of_oracle"]), _pct(h["engine_eff"])]
                     for c, h in headline(summary).items()])
    lines += _specbench_section(result, summary)
    lines += _pair_section(result, summary)
    lines += _parity_section(result, summary)
    lines += _bounds_section(summary)
    lines += ["## Speedup by class (geometric mean)", ""]
    lines += _table(["class", "config", "source", "cases", "speedup", "of oracle",
                     "zero-cost bound", "drafter-cost bound", "engine efficiency", "acceptance",
                     "tokens / verify step (every emitted token, an ending EOS too)"],
                    [[c["cls"], c["config"], c["source"], c["cases"], _x(c["speedup"]),
                      _pct(c["of_oracle"]), _x(c["zero_cost"]), _x(c.get("draft_bound")),
                      _pct(c["engine_eff"]), _pct(c["acceptance"]), _x(c.get("tpf"), "{:.2f}")]
                     for c in sorted(summary["classes"], key=lambda c: (c["cls"], c["source"] != "specdec", c["config"]))])
    lines += ["## Every case", ""]
    lines += _table(["workload", "class", "prompt tokens", "config", "tok/s (min–max)", "TTFT s",
                     "speedup", "of oracle", "acceptance", "MAL", "tokens / forward", "p_cache",
                     "zero-cost bound",
                     "engine efficiency"],
                    [[r["workload"], r["cls"], r["prompt_tokens"], r["config"],
                      f"{r['tok_s']:.1f} ({r['tok_s_min']:.1f}–{r['tok_s_max']:.1f})",
                      f"{r['ttft_s']:.2f}", _x(r["speedup"]), _pct(r["of_oracle"]),
                      _pct(r["acceptance"]), _x(r["mal"], "{:.2f}"), _x(r.get("tpf"), "{:.2f}"),
                      _x(r["p_cache"], "{:.2f}"),
                      _x(r["zero_cost"]), _pct(r["engine_eff"])] for r in summary["rows"]])
    pos = summary["per_position"]
    if pos:
        width = max(len(v) for v in pos.values())
        lines += ["## Per-position acceptance (draft slot i accepted / slot i drafted)", ""]
        lines += _table(["config", *[f"slot {i + 1}" for i in range(width)]],
                        [[c, *[_pct(x) for x in v], *[""] * (width - len(v))] for c, v in pos.items()])
    if summary["per_turn"]:
        lines += ["## Multi-turn editing, per turn", ""]
        lines += _table(["workload", "prompt length", "config", "turn", "tok/s", "speedup", "acceptance"],
                        [[r["workload"], r["length"] or "as written", r["config"], r["turn"] + 1,
                          f"{r['tok_s']:.1f}", _x(r["speedup"]), _pct(r["acceptance"])]
                         for r in summary["per_turn"]])
    c1 = result.cost_curve[1]
    lines += ["## Verify cost curve", "", "cost(L)/cost(1), one forward of an L-token block "
              f"(cost(1) = {c1 * 1e3:.1f} ms):", ""]
    lines += _table(["L", *map(str, result.cost_curve)],
                    [["cost(L)/cost(1)", *[f"{v / c1:.2f}" for v in result.cost_curve.values()]]])
    lines += _peer_section(result, summary)
    lines += _chain_section(result)
    lines += [f"![{Path(pl).stem}]({Path(pl).name})" for pl in plots] + [""]
    return "\n".join(lines)


def _chain_section(result: Any) -> list[str]:
    """Each chain member's share of the chain's accepted tokens (measured runs)."""
    shares: dict[str, dict[str, int]] = {}
    for r in result.records:
        if r.accepted_by and r.run >= 1:
            row = shares.setdefault(f"{r.workload}|{r.config}", {})
            for m, n in r.accepted_by.items():
                row[m] = row.get(m, 0) + n
    if not shares:
        return []
    lines = ["## Chains: accepted tokens by member", ""]
    rows = [[*key.split("|"), ", ".join(f"{m} {n} ({n / max(1, sum(c.values())):.0%})"
                                        for m, n in c.items())] for key, c in shares.items()]
    return lines + _table(["workload", "config", "accepted by member"], rows) + [""]


def _bounds_section(summary: dict) -> list[str]:
    rows = summary.get("bounds") or []
    if not rows:
        return []
    lines = ["## Ceilings from the plain output (offline replay)", "",
             "Tokens per verify step if every step verified the continuation of the most "
             "recent earlier match (linear prompt lookup) or of *every* earlier match at once "
             "(the all-matches token tree), with the modelled speedup under this machine's "
             "cost curve and under a flat one (verifying a block costs one plain step, as on "
             "Metal/CUDA up to ~32 tokens).", ""]
    lines += _table(["workload", "prompt length", "k", "linear tok/step", "tree tok/step",
                     "tree nodes/step", "linear speedup", "tree speedup", "tree speedup (flat)"],
                    [[r["workload"], r["length"] or "as written", r["k"],
                      f"{r['linear']['tokens_per_step']:.2f}",
                      f"{r['all_matches']['tokens_per_step']:.2f}",
                      f"{r['all_matches']['nodes_per_step']:.1f}", _x(r["linear"]["speedup"]),
                      _x(r["all_matches"]["speedup"]), _x(r["all_matches"]["speedup_flat"])]
                     for r in rows])
    return lines


def _parity_section(result: Any, summary: dict) -> list[str]:
    rows = summary["parity"]
    total = sum(r["comparisons"] for r in rows)
    bad = [r for r in rows if r["mismatches"]]
    lines = ["## Parity (strict, N×N)", "",
             f"{total} comparisons of a measured run with a plain run of the same engine, "
             f"same case and turn: **{sum(r['mismatches'] for r in rows)} mismatches** "
             f"({len(bad)} of {len(rows)} case/turn/config groups).", ""]
    if bad:
        diag = {(d["workload"], d["length"], d["turn"], d["config"]): d for d in result.diagnoses}
        lines += _table(["workload", "prompt length", "turn", "config", "mismatches",
                         "first divergence", "diagnosis"],
                        [[r["workload"], r["length"], r["turn"] + 1, r["config"],
                          f"{r['mismatches']}/{r['comparisons']}", r["first_divergence"],
                          diag.get((r["workload"], r["length"], r["turn"], r["config"]),
                                   {}).get("verdict", "(peer: not diagnosed)")] for r in bad])
    return lines


def _peer_section(result: Any, summary: dict) -> list[str]:
    lines = ["## Peers (same prompts, same model, same run)", ""]
    peer_rows = [r for r in summary["rows"] if r["source"] != "specdec"]
    if peer_rows:
        ours = {(r["workload"], r["length"]): r for r in summary["rows"]
                if r["source"] == "specdec" and r["config"] == analysis.PLAIN_LABEL}
        lines += _table(["workload", "prompt tokens", "config", "tok/s", "speedup vs its own plain",
                         "our plain tok/s"],
                        [[r["workload"], r["prompt_tokens"], r["config"], f"{r['tok_s']:.1f}",
                          _x(r["speedup"]), f"{ours[(r['workload'], r['length'])]['tok_s']:.1f}"
                          if (r["workload"], r["length"]) in ours else "–"] for r in peer_rows])
    for name, note in result.peer_notes.items():
        lines.append(f"- {name}: {note}")
    return lines + [""]


def write_report(result: Any, out_dir: str | Path, plots: bool = True) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = build_summary(result)
    made = _plots(result, summary, out) if plots else []
    data = dict(plan=result.plan, meta=result.meta,
                cost_curve={str(k): v for k, v in result.cost_curve.items()},
                peer_notes=result.peer_notes, draft_costs=getattr(result, "draft_costs", {}),
                headline=headline(summary), summary=summary,
                pair_table=pair_table(summary) if _drafts_with_a_model(result.plan) else [],
                diagnoses=result.diagnoses, bounds=result.bounds, unfinished=getattr(result, "unfinished", 0),
                records=[r.to_dict() for r in result.records])
    (out / "results.json").write_text(json.dumps(data, indent=1))
    path = out / "report.md"
    path.write_text(_markdown(result, summary, made))
    return path


def _plots(result: Any, summary: dict, out: Path) -> list[str]:
    return plots.make_all(result, summary, out)
