"""Tokens per target forward of a head, live, on one Spec-Bench question per category (the
quick subset's first question of each; first turn only), SmolLM2-135M fp32, greedy, 128 tokens:
plain once, then each drafter config ungated (every step drafts), each checked token for token
against plain. One JSON line per (question, config) as it finishes, so a run cut short keeps
what it measured. A count, not a timing (the CPU is shared).

Usage: python lab/eagle-head-tokens-per-forward/specbench_live.py HEAD_DIR [CONFIG ...]
CONFIG: a draft type or chain with k, e.g. eagle:5 suffix,eagle:5 suffix:8 (the default). A chain's
first member with a proposal wins the step, so ``eagle,suffix`` is the head alone (it always
proposes); ``suffix,eagle`` drafts with the suffix index where it matches, the head elsewhere."""

from __future__ import annotations

import json
import sys

from specdec.bench import specbench as sb
from specdec.core.text import encode_prompt
from specdec.drafters.spec import DraftSpec
from specdec.engine import generate
from specdec.loader import load
from specdec.resources import drafter_for, prepare_resources

ORDER = ("qa", "math_reasoning", "translation", "summarization", "rag", "mt_bench")


def main() -> None:
    head_dir, configs = sys.argv[1], sys.argv[2:] or ["eagle:5", "suffix,eagle:5", "suffix:8"]
    model, tok = load("smollm2-135m", dtype="float32")
    specs = {}
    for c in configs:
        types, k = c.split(":")
        uses_head = "eagle" in types.split(",")
        spec = DraftSpec(types, num_draft_tokens=int(k), gate=False,
                         draft_model=head_dir if uses_head else None)
        specs[c] = (spec, prepare_resources(spec, model, tok))
    pick = {q.category: q for q in sb.stratified(sb.questions(), 1)}
    for cat in ORDER:
        q = pick[cat]
        ids = encode_prompt(tok, q.turns[0])
        plain = generate(model, tok, ids, drafter=None, max_tokens=128)
        for c, (spec, res) in specs.items():
            out = generate(model, tok, ids, drafter=drafter_for(spec, model, tok, res),
                           max_tokens=128, num_draft_tokens=spec.num_draft_tokens)
            s = out.stats
            print(json.dumps({"q": q.question_id, "category": cat, "config": c,
                              "identical": list(out.tokens) == list(plain.tokens),
                              "tokens": s.generated_tokens, "tokens_per_forward": round(s.tokens_per_forward, 3),
                              "accepted_by_position": list(s.accepted_by_position),
                              "drafted_by_position": list(s.drafted_by_position)}), flush=True)


if __name__ == "__main__":
    main()
