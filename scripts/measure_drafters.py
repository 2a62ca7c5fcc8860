"""Measure every drafter on real prompts in one process (the numbers in the closing notes).

    make measure-drafters          # OpenBLAS preloaded, SmolLM2-135M, 128 tokens

For each prompt: plain decoding before and after the drafter runs (their mean is the
baseline, so drift over the run hits both sides), then each drafter config once. Prints
one JSON line per run and a Markdown table: decode tok/s, speedup over the baseline,
acceptance, mean acceptance length, and whether the tokens equal plain decoding.
"""

from __future__ import annotations

import argparse
import json
import sys

from specdec.drafters import make_drafter
from specdec.drafters.adaptive import cost_curve_for
from specdec.engine import generate
from specdec.loader import load
from specdec.prompts import parity_prompts

PROMPTS = ["code_textwrap_doc", "json_records", "passage_zen", "open_story"]


def configs(model, tok, k_max: int) -> dict[str, dict]:
    cost = cost_curve_for(model, k_max + 1)
    out = {f"ngram k={k}": dict(spec="ngram", num_draft_tokens=k) for k in (1, 2, 4, 8)}
    out.update({
        "ngram adaptive-k": dict(spec="ngram", num_draft_tokens=k_max, adaptive_k=cost),
        "ngram-mod k=4": dict(spec="ngram-mod", num_draft_tokens=4),
        "suffix k=4": dict(spec="suffix", num_draft_tokens=4),
        "suffix k=8": dict(spec="suffix", num_draft_tokens=8),
        "ngram,suffix k=4": dict(spec="ngram,suffix", num_draft_tokens=4),
    })
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=8)
    args = ap.parse_args()
    model, tok = load(args.model)
    prompts = parity_prompts()
    rows = []
    for name in PROMPTS:
        p = prompts[name]
        generate(model, tok, p, drafter=None, max_tokens=8)  # warm-up
        base1 = generate(model, tok, p, drafter=None, max_tokens=args.max_tokens)
        runs = []
        for label, c in configs(model, tok, args.k_max).items():
            spec = c.pop("spec")
            k = c["num_draft_tokens"]
            d = make_drafter(spec, eos=tok.eos_token_ids, tokenizer=tok, **c)
            r = generate(model, tok, p, drafter=d, max_tokens=args.max_tokens, num_draft_tokens=k)
            runs.append((label, r))
        base2 = generate(model, tok, p, drafter=None, max_tokens=args.max_tokens)
        base = (base1.stats.decode_tokens_per_s + base2.stats.decode_tokens_per_s) / 2
        for label, r in runs:
            s = r.stats
            row = dict(prompt=name, drafter=label, tok_s=s.decode_tokens_per_s, base_tok_s=base,
                       speedup=s.decode_tokens_per_s / base, acceptance=s.acceptance_rate,
                       mal=s.mean_acceptance_length, parity=r.tokens == base1.tokens)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| prompt | drafter | tok/s | plain tok/s | speedup | acceptance | MAL | parity |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['prompt']} | {r['drafter']} | {r['tok_s']:.1f} | {r['base_tok_s']:.1f} | "
              f"{r['speedup']:.2f}x | {r['acceptance']:.0%} | {r['mal']:.2f} | {r['parity']} |")
    sys.exit(0 if all(r["parity"] for r in rows) else 1)


if __name__ == "__main__":
    main()
