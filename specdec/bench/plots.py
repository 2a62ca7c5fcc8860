"""PNG plots of a benchmark summary (matplotlib, no display needed).

Contract: ``make_all(result, summary, out_dir)`` writes and returns the paths of
``speedup_by_class.png`` (ours, per class and config, the zero-cost bound marked on each bar),
``per_position.png`` (acceptance of draft slot i), ``cost_curve.png`` (cost(L)/cost(1))
``specbench.png`` for Spec-Bench questions (per category, the published PLD and EAGLE-2
figures marked) and, when peers ran, ``peers.png`` (each engine's speedup over its own plain decoding
and its absolute tok/s on the same prompts).
Tests: tests/bench/test_plots.py, none of its own (tests/bench/test_report.py writes its
report with plots off).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from . import analysis, specbench as sb


def _plt():
    import matplotlib  # heavy dependency: only when a report draws its plots

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt  # after use(): the backend is chosen first

    return plt


def _bars(ax, n_groups: int, series: dict[str, list[float]]) -> list[list[float]]:
    """One bar per series in each of ``n_groups`` groups; returns each series' x positions."""
    width = 0.8 / max(len(series), 1)
    out = []
    for j, (label, ys) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(n_groups)]
        ax.bar(xs, ys, width, label=label)
        out.append(xs)
    return out


def _speedup_axes(plt, fig, ax, groups: list[str], title: str, path: Path, legend: int) -> None:
    """The speedup plots' shared frame: plain's line, group labels, title, saved and closed."""
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(groups)), groups, rotation=15)
    ax.set_ylabel("speedup over plain decoding (geomean)")
    ax.set_title(title)
    ax.legend(fontsize=legend, ncols=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def speedup_by_class(summary: dict, path: Path) -> None:
    plt = _plt()
    rows = [c for c in summary["classes"] if c["source"] == "specdec" and c["config"] != "plain"]
    classes = sorted({c["cls"] for c in rows})
    configs = sorted({c["config"] for c in rows})
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(classes)), 4.2))
    cell = {(c["cls"], c["config"]): c for c in rows}
    series = {cfg: [(cell.get((k, cfg)) or {}).get("speedup") or 0 for k in classes] for cfg in configs}
    for cfg, xs in zip(configs, _bars(ax, len(classes), series)):
        ce = [(cell.get((k, cfg)) or {}).get("zero_cost") or 0 for k in classes]
        ax.scatter(xs, ce, marker="_", s=300 * 0.8 / max(len(configs), 1), color="black", zorder=3)
    _speedup_axes(plt, fig, ax, classes,
                  "Speedup by class (black tick: zero-cost bound of the same steps)", path, 8)


def per_position(summary: dict, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for cfg, acc in sorted(summary["per_position"].items()):
        ax.plot(range(1, len(acc) + 1), acc, marker="o", label=cfg)
    ax.set_xlabel("draft slot")
    ax.set_ylabel("accepted / drafted")
    ax.set_ylim(0, 1.05)
    ax.set_title("Per-position acceptance")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cost_curve(cost: dict[int, float], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ls = sorted(cost)
    ax.plot(ls, [cost[L] / cost[1] for L in ls], marker="o", label="measured cost(L)/cost(1)")
    ax.plot(ls, ls, color="grey", ls="--", lw=0.8, label="L (no batching gain)")
    ax.set_xlabel("block length L (1 + draft tokens)")
    ax.set_ylabel("cost relative to one token")
    ax.set_title(f"Verify cost curve (cost(1) = {cost[1] * 1e3:.0f} ms)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def peers(summary: dict, path: Path) -> bool:
    """Speedup and absolute tok/s of every engine on the cases the peers ran."""
    rows = summary["rows"]
    peer_cases = {(r["workload"], r["length"]) for r in rows if r["source"] != "specdec"}
    if not peer_cases:
        return False
    speed: dict[str, list[float]] = defaultdict(list)
    tps: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if (r["workload"], r["length"]) in peer_cases:
            label = r["config"] if r["source"] != "specdec" else f"specdec: {r['config']}"
            tps[label].append(r["tok_s"])
            if r["speedup"] is not None and not r["config"].endswith("plain"):
                speed[label].append(r["speedup"])
    plt = _plt()
    labels = sorted(tps)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 0.45 * len(labels) + 1.8))
    a1.barh(labels, [analysis.geomean(speed[k]) or 0 for k in labels])
    a1.axvline(1.0, color="grey", ls="--", lw=0.8)
    a1.set_xlabel("speedup over the same engine's plain decoding (geomean)")
    a2.barh(labels, [analysis.geomean(tps[k]) or 0 for k in labels])
    a2.set_xlabel("decode tok/s (geomean over the same cases)")
    a2.set_yticks([])
    fig.suptitle("Peers side by side, same prompts and model")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def specbench(summary: dict, path: Path) -> None:
    """Our speedup per Spec-Bench category and overall, one bar per config; the published
    PLD and EAGLE-2 figures (A100, Vicuna-7B) as markers."""
    table = {c: t for c, t in summary["specbench"].items() if c != analysis.PLAIN_LABEL}
    cats = [c for c in sb.CATEGORIES if any(c in t for t in table.values())] + ["overall"]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(cats)), 4.2))
    _bars(ax, len(cats), {cfg: [(t.get(c) or {}).get("speedup") or 0 for c in cats]
                          for cfg, t in sorted(table.items())})
    published = {r.method: r for r in sb.LEADERBOARD}
    for name, marker in (("PLD", "x"), ("EAGLE-2", "*")):
        r = published[name]
        ys = [dict(zip(sb.CATEGORIES, r.speedups)).get(c, r.overall) for c in cats]
        ax.scatter(range(len(cats)), ys, marker=marker, color="black", zorder=3,
                   label=f"{name} (published: {r.model}, A100)")
    _speedup_axes(plt, fig, ax, cats, "Spec-Bench by category", path, 7)


def make_all(result: Any, summary: dict, out: Path) -> list[str]:
    made = []
    if summary.get("specbench"):
        specbench(summary, out / "specbench.png")
        made.append(str(out / "specbench.png"))
    if summary["classes"]:
        speedup_by_class(summary, out / "speedup_by_class.png")
        made.append(str(out / "speedup_by_class.png"))
    if summary["per_position"]:
        per_position(summary, out / "per_position.png")
        made.append(str(out / "per_position.png"))
    cost_curve(result.cost_curve, out / "cost_curve.png")
    made.append(str(out / "cost_curve.png"))
    if peers(summary, out / "peers.png"):
        made.append(str(out / "peers.png"))
    return made
