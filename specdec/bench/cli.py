"""``specdec bench``: flags → one ``BenchPlan`` → ``run_plan`` → report.

Contract: a profile (``--profile``; ``--quick`` = ``--profile quick``, or a question set's
stratified subset, ``--profile specbench --quick``) supplies every
default; each flag given overrides it. Workloads come from ``--workload FILE`` (JSONL, see
``workloads``) or the built-in set, filtered by ``--workloads``/``--classes``. Configs come
from ``--config SPEC`` (repeatable) or the sweep flags (``--draft-type`` ×
``--num-draft-tokens``
× ``--ngram-min``, plus ``--adaptive-k`` / ``--gate`` variants). The command writes
report.md, results.json and PNG plots to ``--out``, prints the headline, and exits 1 if
any of our configs produced tokens different from plain decoding (peers' mismatches are
reported, not fatal: they are not our output).
Tests: tests/bench/test_cli.py, tests/bench/test_report.py, tests/bench/test_runner.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import add_distributed_flags
from ..drafters.spec import DraftSpec
from .configs import parse_config, sweep
from .peers import PEERS
from .profiles import PROFILES, Profile, build_warm_table

if TYPE_CHECKING:
    from .journal import Journal


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _peer_ks(text: str) -> tuple[int, ...]:
    """``--peer-k 2,3,4``: distinct positive draft lengths, in the order given."""
    try:
        ks = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected draft lengths as a comma list of integers >= 1 (e.g. 2,4,8), got {text!r}")
    if min(ks) < 1:
        raise argparse.ArgumentTypeError(f"draft lengths must be >= 1 (e.g. 2,4,8), got {text!r}")
    if len(set(ks)) != len(ks):
        raise argparse.ArgumentTypeError(f"each draft length once, got {text!r}")
    return ks


def _ids(text: str) -> set[int]:
    """``--questions 81-90,161``: question ids, single or as inclusive ranges."""
    try:
        out: set[int] = set()
        for part in filter(None, (x.strip() for x in text.split(","))):
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected question ids or ranges (e.g. 81-90,161), got {text!r}")
    if not out:
        raise argparse.ArgumentTypeError(f"expected question ids or ranges (e.g. 81-90,161), got {text!r}")
    return out


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_bench_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark drafters and peers: parity, speed, the oracle ceiling",
                       description=__doc__.split("\n")[0])
    p.add_argument("--profile", choices=sorted(PROFILES), default="default")
    p.add_argument("--quick", action="store_true",
                   help="the 'quick' profile (CI smoke test); with --profile specbench, its "
                        "stratified subset of a few questions per category")
    p.add_argument("--per-category", type=int, metavar="N",
                   help="Spec-Bench profile: N questions per category (stratified)")
    p.add_argument("--list-profiles", action="store_true", help="print the profiles and exit")
    p.add_argument("--model", help="target model (packaged name, .gguf or mlx-lm dir)")
    p.add_argument("--draft-model", help="draft model for 'model' configs and mlx-lm's peer run; "
                   "the head's directory for 'eagle' configs (an EAGLE-3 head), the checkpoint "
                   "holding mtp.* weights for 'mtp' ones (default: the model's own)")
    p.add_argument("--workload", help="a JSONL workload file instead of the built-in set")
    p.add_argument("--workloads", type=_names, help="only these workload names (comma list)")
    p.add_argument("--classes", "--categories", type=_names,
                   help="only these classes (comma list; Spec-Bench's: its categories)")
    p.add_argument("--questions", type=_ids, metavar="IDS",
                   help="Spec-Bench profile: only these question ids (e.g. 81-90,161)")
    p.add_argument("--write-workloads", metavar="FILE",
                   help="write the built-in workloads as JSONL (the file format) and exit")
    p.add_argument("--config", action="append", help="a config spec, e.g. ngram:k=4:n=2 (repeatable)")
    p.add_argument("--draft-type", action="append", help="sweep: draft types (repeatable)")
    p.add_argument("--num-draft-tokens", type=_ints, help="sweep: k values, e.g. 2,4,8")
    p.add_argument("--ngram-min", type=_ints, help="sweep: n_min values for ngram, e.g. 1,2,3")
    p.add_argument("--adaptive-k", action="store_true", help="sweep: add adaptive-k variants")
    p.add_argument("--gate", action="store_true",
                   help="sweep: add ungated variants (nogate) beside the gated default")
    p.add_argument("--prompt-tokens", type=_ints, help="fit prompts to these lengths, e.g. 600,800")
    p.add_argument("--runs", type=int, help="measured runs per config and case (after 1 warm-up)")
    p.add_argument("--max-tokens", "-m", type=int, help="tokens per turn")
    p.add_argument("--peers", type=_names,
                   help="hf-transformers,llama.cpp,mlx-lm or 'none'")
    p.add_argument("--peer-k", type=_peer_ks,
                   help="draft lengths the peers' speculative runs use, one run per k "
                        "(comma list, e.g. 2,3,4,6,8; default: the profile's, else 4)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--out", help="output directory (default bench-results/<profile>-<time>)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the stopped run in DIR (its records.jsonl): the same command "
                        "and checkout, plus --resume; the cases it holds are not run again")
    p.add_argument("--max-questions", type=int, metavar="N",
                   help="measure at most N more cases (Spec-Bench: questions) of the plan, then "
                        "write the report of those done (0: only the report); --resume DIR continues")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--trace", metavar="FILE",
                   help="write a JSONL row per decode step of every run (lab/gate-trace)")
    p.add_argument("--no-oracle", action="store_true",
                   help="skip the oracle drafter runs and the replay bounds")
    p.add_argument("--no-warmup", action="store_true",
                   help="no warm-up repetition per case (the cost measurements, which run "
                        "every model first, are the only warm-up): halves a --runs 1 sweep")
    add_distributed_flags(p)


def _workloads(args: argparse.Namespace, prof: Profile) -> list:
    # imports mlx: `specdec --help` starts without it (so do the imports below that say so)
    from .workloads import builtin_workloads, load_workloads

    if prof.questions == "specbench" and not args.workload:
        from .specbench import workloads as specbench_workloads

        pool = specbench_workloads(args.per_category or (prof.quick_per_category if args.quick
                                                         else None), args.questions)
        wanted = args.workloads
    elif args.workload:
        pool = load_workloads(args.workload)
        wanted = args.workloads
    else:
        pool = builtin_workloads()
        wanted = args.workloads or list(prof.workloads) or None
    by_name = {w.name: w for w in pool}
    if wanted:
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise ValueError(f"unknown workload(s) {missing}; known: {', '.join(by_name)}")
        pool = [by_name[n] for n in wanted]
    if args.classes:
        pool = [w for w in pool if w.cls in args.classes]
    if not pool:
        raise ValueError("no workloads left after --workloads/--classes")
    return pool


def _configs(args: argparse.Namespace, prof: Profile) -> list:
    if args.config and (args.draft_type or args.num_draft_tokens or args.ngram_min
                        or args.adaptive_k or args.gate):
        raise ValueError("give --config specs or the sweep flags (--draft-type, "
                         "--num-draft-tokens, --ngram-min, --adaptive-k, --gate), not both")
    if args.draft_type or args.num_draft_tokens or args.ngram_min or args.adaptive_k or args.gate:
        return sweep(args.draft_type or ["ngram"], args.num_draft_tokens or [DraftSpec.num_draft_tokens],
                     args.ngram_min or [1], adaptive=args.adaptive_k, gate=args.gate)
    cfgs = [parse_config(s) for s in (args.config or prof.configs)]
    if any(c.baseline for c in cfgs):
        raise ValueError("plain decoding always runs as the baseline: drop 'none'")
    return cfgs


def build_plan(args: argparse.Namespace) -> tuple[Any, Profile, str]:
    from .runner import BenchPlan  # imports mlx: see above

    name = args.profile
    if args.per_category is not None and (args.per_category < 1 or not PROFILES[name].questions):
        raise ValueError("--per-category N takes N >= 1 and a question-set profile "
                         "(--profile specbench)")
    if args.questions and PROFILES[name].questions != "specbench":
        raise ValueError("--questions selects Spec-Bench questions: use it with --profile specbench")
    if args.quick and not PROFILES[name].quick_per_category:
        name = "quick"  # a question set's --quick is its own subset
    prof = PROFILES[name]
    distributed = getattr(args, "distributed", False)
    peers = args.peers if args.peers is not None else list(prof.peers)
    if distributed and args.peers is None and peers:
        # the peers run in one process of their own: a sharded run leaves the profile's out
        print(f"specdec: --distributed leaves out the profile's peers ({', '.join(peers)})",
              file=sys.stderr)
        peers = []
    peers = [] if peers == ["none"] else peers

    bad = [p for p in peers if p not in PEERS]
    if bad:
        raise ValueError(f"unknown peer(s) {bad}; choose from {', '.join(PEERS)} or 'none'")
    for flag in ("runs", "max_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1")
    plan = BenchPlan(
        model=args.model or prof.model, workloads=_workloads(args, prof),
        configs=_configs(args, prof),
        prompt_tokens=args.prompt_tokens or list(prof.prompt_tokens),
        runs=args.runs or prof.runs, max_tokens=args.max_tokens or prof.max_tokens,
        peers=peers, peer_k=args.peer_k or prof.peer_k, draft_model=args.draft_model or prof.draft_model,
        dtype=args.dtype, oracle=prof.oracle and not args.no_oracle,
        warmup=not args.no_warmup)
    if distributed:
        _check_distributed(plan, prof)
    return plan, prof, name


def _check_distributed(plan: Any, prof: Profile) -> None:
    """Refuse, at start-up, what a sharded target cannot run."""
    from ..distributed import DistributedError, refuse_unsharded_features  # imports mlx: see above

    if plan.peers:
        raise DistributedError(f"the peers ({', '.join(plan.peers)}) do not run sharded: pass "
                               "--peers none with --distributed")
    trees = [c.text for c in plan.configs if c.tree_budget]
    if trees:
        print(f"specdec: configs with token trees: {', '.join(trees)} (use linear configs, "
              "e.g. --profile distributed)", file=sys.stderr)
    refuse_unsharded_features(tree_budget=len(trees))
    if prof.warm_from:
        raise DistributedError("a warm-start profile loads a second model unsharded: run it "
                               "without --distributed")


def _progress(total: int):
    from tqdm import tqdm  # 50 ms to import, for a bench run's progress bar only: not at `specdec --help`

    bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)

    def tick(desc: str) -> None:
        bar.set_description(desc[:48])
        bar.update(1)

    return tick, bar


def cmd_bench(args: argparse.Namespace) -> int:
    if args.list_profiles:
        for n, p in PROFILES.items():
            print(f"{n:10s} {p.description}")
        return 0
    if args.write_workloads:
        from .workloads import builtin_workloads, write_workloads  # imports mlx: see above

        write_workloads(builtin_workloads(), args.write_workloads)
        print(f"wrote {args.write_workloads}")
        return 0
    plan, prof, name = build_plan(args)
    if not getattr(args, "distributed", False):
        return _bench(args, plan, prof, name)
    from ..distributed import load_sharded, run_sharded  # imports mlx: see above

    group, model, tok = load_sharded(plan.model, plan.dtype)
    plan.distributed = group.size()
    # rank 0 measures on the sharded model; the other ranks follow its forwards
    return run_sharded(group, model, tok, args.distributed_timeout,
                       lambda leader, tokenizer: _bench(args, plan, prof, name, (leader, tokenizer)))


def _journal(args: argparse.Namespace, plan: Any, name: str) -> tuple[Path, Journal]:
    """The output directory and its run's journal (``--resume``: the stopped run's, checked
    against this command's plan before anything is measured)."""
    from .journal import Journal, code_version  # imports mlx: see above
    from .runner import plan_identity  # imports mlx: see above

    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise ValueError(f"--resume {args.resume} writes into its own directory: drop --out {args.out}")
    out = Path(args.resume or args.out or f"bench-results/{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    journal = Journal.open(out, plan_identity(plan, code_version()), bool(args.resume),
                           args.max_questions)
    out.mkdir(parents=True, exist_ok=True)
    return out, journal


def _bench(args: argparse.Namespace, plan: Any, prof: Profile, name: str,
           target: tuple[Any, Any] | None = None) -> int:
    """Measure ``plan`` (on ``target`` when the caller loaded it), write the report, print
    the headline; 1 when any of our configs diverged from plain decoding."""
    from .report import build_summary, headline, write_report  # imports mlx: see above
    from ..decode.trace import tracing  # imports mlx: see above
    from .runner import run_plan, total_steps  # imports mlx: see above

    out, journal = _journal(args, plan, name)
    if prof.warm_from:
        info = build_warm_table(prof.warm_from, plan.workloads, plan.max_tokens,
                                out / "warm.ngm", plan.dtype)
        print(f"warm table: {json.dumps(info)}", file=sys.stderr)
        plan.warm_table = info["file"]
    tick, bar = _progress(total_steps(plan, len(journal.done)))
    with tracing(args.trace) if args.trace else nullcontext():
        result = run_plan(plan, tick, target, journal)
    bar.close()
    report = write_report(result, out, plots=not args.no_plots)
    if result.unfinished:
        print(f"stopped: {result.unfinished} case(s) left; continue with the same command and "
              f"--resume {out}")
    summary = build_summary(result)
    ours_bad = sum(r["mismatches"] for r in summary["parity"] if r["source"] == "specdec")
    print(f"report: {report}")
    def fmt(v: float | None, spec: str) -> str:
        return "–" if v is None else format(v, spec)

    for cfg, t in summary.get("specbench", {}).items():  # Spec-Bench: per category
        print(f"  {cfg:32s} " + "  ".join(f"{c} {fmt(v['speedup'], '.2f')}x/{fmt(v['tpf'], '.2f')}"
                                           for c, v in t.items()))
    for cfg, h in ({} if "specbench" in summary else headline(summary)).items():
        print(f"  {cfg:32s} echo-heavy {fmt(h['echo_speedup'], '.2f')}x  open-ended "
              f"{fmt(h['open_speedup'], '.2f')}x  of oracle {fmt(h['of_oracle'], '.0%')}")
    for peer, note in result.peer_notes.items():
        print(f"  {peer}: {note}")
    print(f"parity: {ours_bad} mismatches of ours" + (" — see the report" if ours_bad else ""))
    return 1 if ours_bad else 0


__all__ = ["add_bench_parser", "cmd_bench", "build_plan"]
