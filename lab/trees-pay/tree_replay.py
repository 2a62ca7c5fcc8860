"""Offline replay: tokens per verify step of linear vs tree drafts on real greedy outputs.

Greedy verification accepts the longest root path of the draft that the target itself
would generate, and the target's plain greedy output is known, so acceptance can be
computed without running a verify forward: at each step the drafter proposes from the
context so far, the tree is walked along the true continuation (``trie.walk``), and the
step emits the accepted tokens plus the target's own token. This measures what trees
could gain in tokens per step, not in speed (a tree's verify costs more than a linear
one's; see ``specdec.measure``'s cost curve).

    python lab/trees-pay/tree_replay.py [--model smollm2-135m] [--max-tokens 100]
    python lab/trees-pay/tree_replay.py --shaped [--prompt-tokens 300] [--max-tokens 128]

Prints one line per workload and drafter configuration: mean tokens per step, linear at
depth k and trees of budget 8 / 16 at the same depth.

``--shaped`` asks instead how much any shaper could gain over the linear draft: per
drafter and workload, tokens per step, *modelled* speedup (each step priced by the
model's measured verify cost curve, tree steps times the measured tree overhead, as
``--draft-tree-budget auto`` prices them) and nodes verified per step, for the linear
draft, ``auto``'s ``TreeShaper``, and the *best cut*: a clairvoyant shaper that verifies,
each step, the fewest best-first nodes of the drafter's tree that still hold the whole
path greedy decoding takes through it — the bound on any choice of how much of this
drafter's tree to verify — and the best cut of the linear draft alone, which tells how
much of that bound is knowing where a chain stops rather than branching.

``--curve FILE`` prices the steps with another machine's curve instead of this one's
cached curve: the ``relative`` cost(L)/cost(1) of ``--model`` in a ``lab/verify-cost-curves/cost_shapes.py``
JSON (``lab/verify-cost-curves/h100/cost_bf16.json``: an H100, flat past L = 2), tree steps
times ``--tree-overhead`` (1.0 unless measured there). The acceptance is this model's on
this machine (greedy output does not depend on the backend's speed), so this models what
the same drafts and shaper would gain on that machine's curve.
"""

from __future__ import annotations

import argparse
import json
from typing import Callable, Sequence

from specdec.bench.analysis import geomean
from specdec.bench.workloads import ECHO_CLASSES, builtin_workloads, fit_prompt
from specdec.drafters import NgramDrafter
from specdec.drafters.chain import ChainDrafter
from specdec.drafters.ngram import all_match_continuations
from specdec.drafters.suffix import SuffixDrafter
from specdec.drafters.trie import merge_paths, walk
from specdec.engine import generate
from specdec.loader import load
from specdec.decode.rows import draft_for_step
from specdec.core.text import encode_prompt
from specdec.core.trees import cut
from specdec.measure import MAX_AUTO_NODES, resolve_tree_budget
from specdec.policy.tree_shape import TreeShaper, best_cut, cost_at

DRAFTERS: dict[str, Callable] = {
    "ngram": lambda: NgramDrafter(1, 3),
    "suffix": lambda: SuffixDrafter(),
    "suffix-bestfirst": lambda: SuffixDrafter(tree_linear_first=False),
    "ngram,suffix": lambda: ChainDrafter([NgramDrafter(1, 3), SuffixDrafter()]),
    "suffix,ngram": lambda: ChainDrafter([SuffixDrafter(), NgramDrafter(1, 3)]),
}


def replay(prompt: Sequence[int], out: Sequence[int], propose: Callable, begin: Callable) -> float:
    """Mean tokens per step when each step's draft is ``propose(context)``."""
    begin(list(prompt))
    context, i, steps = list(prompt), 0, 0
    while i < len(out):
        draft = propose(context)
        got = min(walk(draft, out[i:]), len(out) - i - 1) + 1 if draft else 1
        context += out[i : i + got]
        i += got
        steps += 1
    return len(out) / steps


def replay_shaped(prompt: Sequence[int], out: Sequence[int], drafter, k: int,
                  shaper: TreeShaper | str | None, cost: dict, tree_cost: dict) -> tuple:
    """(tokens per step, modelled speedup, nodes per step) of ``drafter`` at depth ``k``
    with a linear draft (``shaper`` None), a ``TreeShaper``, ``"best"`` (``best_cut``) or
    ``"best linear"`` (``best_cut`` of the linear draft)."""
    drafter.begin(list(prompt))
    context, i, steps, units, nodes = list(prompt), 0, 0, 0.0, 0
    while i < len(out):
        full = draft_for_step(drafter, context, min(k, len(out) - i - 1),
                              0 if shaper in (None, "best linear") else MAX_AUTO_NODES)
        n = len(full)
        if shaper in ("best", "best linear"):
            n = best_cut(full.tokens, full.parents, out[i:])
        elif shaper is not None and full:
            n = shaper.budget(full.parents)
        draft = cut(full, full.depth, n) if full else full
        got = min(walk(draft, out[i:]), len(out) - i - 1) + 1 if draft else 1
        units += cost_at(cost if draft.is_linear else tree_cost, len(draft) + 1) / cost[1]
        if draft:
            drafter.observe(got - 1)
        if isinstance(shaper, TreeShaper) and full:
            shaper.update(full.tokens, full.parents, out[i : i + got])
        context += out[i : i + got]
        i, steps, nodes = i + got, steps + 1, nodes + len(draft)
    return len(out) / steps, len(out) / units, nodes / steps


def machine_curves(model, curve_file: str | None, model_name: str,
                   tree_overhead: float) -> tuple[dict, dict]:
    """(linear, tree) cost curves: this machine's cached ones (``auto``'s own), or the
    ``relative`` curve of ``model_name`` in a ``cost_shapes.py`` JSON, trees times
    ``tree_overhead``."""
    if curve_file is None:
        _, probe = resolve_tree_budget(model, "auto")  # the cached curve and tree overhead
        return probe.cost, probe.tree_cost
    try:
        with open(curve_file) as f:
            models = json.load(f)["models"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"--curve {curve_file}: not a cost_shapes.py JSON ({e!r}); "
                         "make one with lab/verify-cost-curves/cost_shapes.py --out FILE") from None
    if model_name not in models:
        raise SystemExit(f"{curve_file} has no curve for {model_name!r}; it has {sorted(models)}")
    cost = {int(L): float(r) for L, r in models[model_name]["relative"].items()}
    return cost, {L: r * tree_overhead for L, r in cost.items()}


KINDS = ("linear", "auto", "best linear", "best")


def shaped_table(prompt: Sequence[int], out: Sequence[int], k: int, cost: dict,
                 tree_cost: dict) -> dict[tuple[str, str], float]:
    """Prints one workload's table; returns its modelled speedup per (drafter, kind)."""
    speedups = {}
    print(f"  {'drafter':10s} " + "  ".join(f"{kind:>18s}" for kind in KINDS)
          + "   (tokens/step, modelled speedup, nodes/step; best = best cut)")
    for dname in ("ngram", "suffix"):
        cells = []
        for kind in KINDS:
            shaper = TreeShaper(cost, MAX_AUTO_NODES, tree_cost) if kind == "auto" else \
                (None if kind == "linear" else kind)
            t, x, n = replay_shaped(prompt, out, DRAFTERS[dname](), k, shaper, cost, tree_cost)
            cells.append(f"{t:5.2f} {x:5.2f}x {n:4.1f}")
            speedups[dname, kind] = x
        print(f"  {dname:10s} " + "  ".join(f"{c:>18s}" for c in cells))
    return speedups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--workloads", default="code_rename,code_hints,code_signature,json_lookup,passage_json")
    ap.add_argument("--shaped", action="store_true", help="linear vs auto vs the best cut (doc)")
    ap.add_argument("--prompt-tokens", type=int, default=None, help="fit prompts as the bench does")
    ap.add_argument("--num-draft-tokens", type=int, default=4, help="k for --shaped")
    ap.add_argument("--curve", default=None,
                    help="--shaped: price steps with this cost_shapes.py JSON's curve (doc)")
    ap.add_argument("--tree-overhead", type=float, default=None,
                    help="--shaped --curve: tree step / linear step of the same length there "
                         "(default 1.0; without --curve the measured one is used)")
    args = ap.parse_args()
    if args.curve and not args.shaped:
        ap.error("--curve prices the --shaped replay: add --shaped")
    if args.tree_overhead is not None and not args.curve:
        ap.error("--tree-overhead applies to a --curve from another machine; this machine's "
                 "own tree overhead is measured")
    model, tok = load(args.model)
    if args.shaped:
        cost, tree_cost = machine_curves(model, args.curve, args.model,
                                         1.0 if args.tree_overhead is None else args.tree_overhead)
        print("cost(L)/cost(1):", {L: round(cost_at(cost, L) / cost[1], 2) for L in (2, 3, 5, 9, 17, 33)})
    wanted, echo = args.workloads.split(","), []
    for w in (w for w in builtin_workloads() if w.name in wanted):
        w = fit_prompt(tok, w, args.prompt_tokens) if args.prompt_tokens else w
        prompt = encode_prompt(tok, w.first_messages())
        out = generate(model, tok, prompt, drafter=None, max_tokens=args.max_tokens).tokens
        print(f"\n{w.name} ({w.cls}): {len(prompt)} prompt tokens, {len(out)} generated")
        if args.shaped:
            table = shaped_table(prompt, out, args.num_draft_tokens, cost, tree_cost)
            echo += [table] if w.cls in ECHO_CLASSES else []
            continue
        print(f"  {'drafter':18s} {'k':>2s}  {'linear':>6s}  {'tree8':>6s}  {'tree16':>6s}  {'all-matches':>11s}")
        for k in (4, 8):
            # the bound: every earlier ngram match's continuation, unlimited budget
            bound = replay(prompt, out, lambda c: merge_paths(all_match_continuations(c, 1, 3, k), 10**9, k),
                           lambda p: None)
            for name, make in DRAFTERS.items():
                row = []
                for budget in (None, 8, 16):
                    d = make()
                    prop = (lambda c, d=d: d.propose(c, k)) if budget is None else (
                        lambda c, d=d, b=budget: d.propose_tree(c, k, b))
                    row.append(replay(prompt, out, prop, d.begin))
                print(f"  {name:18s} {k:2d}  " + "  ".join(f"{r:6.2f}" for r in row) + f"  {bound:11.2f}")
    if echo:
        print(f"\necho-heavy geomean of modelled speedup ({len(echo)} workloads):")
        for dname in ("ngram", "suffix"):
            print(f"  {dname:10s} " + "  ".join(
                f"{kind} {geomean(e[dname, kind] for e in echo):.2f}x" for kind in KINDS))


if __name__ == "__main__":
    main()
