"""Offline replay: tokens per verify step of linear vs tree drafts on real greedy outputs.

Greedy verification accepts the longest root path of the draft that the target itself
would generate, and the target's plain greedy output is known, so acceptance can be
computed without running a verify forward: at each step the drafter proposes from the
context so far, the tree is walked along the true continuation (``trie.walk``), and the
step emits the accepted tokens plus the target's own token. This measures what trees
could gain in tokens per step, not in speed (a tree's verify costs more than a linear
one's; see ``specdec.measure``'s cost curve).

    python scripts/tree_replay.py [--model smollm2-135m] [--max-tokens 100]

Prints one line per workload and drafter configuration: mean tokens per step, linear at
depth k and trees of budget 8 / 16 at the same depth.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from specdec.bench.workloads import builtin_workloads
from specdec.drafters import NgramDrafter
from specdec.drafters.chain import ChainDrafter
from specdec.drafters.ngram import all_match_continuations
from specdec.drafters.suffix import SuffixDrafter
from specdec.drafters.trie import merge_paths, walk
from specdec.engine import generate
from specdec.loader import load
from specdec.text import encode_prompt

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--workloads", default="code_rename,code_hints,code_signature,json_lookup,passage_json")
    args = ap.parse_args()
    model, tok = load(args.model)
    wanted = args.workloads.split(",")
    for w in (w for w in builtin_workloads() if w.name in wanted):
        prompt = encode_prompt(tok, w.first_messages())
        out = generate(model, tok, prompt, drafter=None, max_tokens=args.max_tokens).tokens
        print(f"\n{w.name} ({w.cls}): {len(prompt)} prompt tokens, {len(out)} generated")
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


if __name__ == "__main__":
    main()
