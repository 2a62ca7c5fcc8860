"""Cross-model warm start: an ngram-mod table built serving Qwen2.5-Coder-0.5B, reused by
Qwen2.5-Coder-1.5B (identical tokenizers), on the 1.5B's first turn: cold vs warm.

    LD_PRELOAD=$(python -c 'from specdec.backend import openblas_path; print(openblas_path())') \\
        python lab/cross-model-warm-start/warm_start.py        # needs specdec[models] and specdec[models-large]

Acceptance is a count, not a timing, so this measurement is not sensitive to machine load.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from specdec.drafters.ngram_mod import NgramModDrafter, NgramModTable, tokenizer_fingerprint
from specdec.engine import generate
from specdec.loader import load
from specdec.prompts import code_edit_prompt

WARMUP_TURNS = [
    code_edit_prompt("textwrap", "dedent", "Add type hints."),
    code_edit_prompt("textwrap", "dedent", "Rename 'margin' to 'common_prefix'."),
]
TURN_1 = code_edit_prompt("textwrap", "dedent", "Add a one-line comment above every line.")


def run(model, tok, table, prompt, max_tokens):
    d = NgramModDrafter(table, eos=tok.eos_token_ids)
    r = generate(model, tok, prompt, drafter=d, max_tokens=max_tokens, num_draft_tokens=4)
    return r, dict(acceptance=r.stats.acceptance_rate, mal=r.stats.mean_acceptance_length,
                   accepted=r.stats.accepted, steps=r.stats.verify_steps, tok_s=r.stats.decode_tokens_per_s)


def main(max_tokens: int = 96) -> None:
    small, small_tok = load("qwen2.5-coder-0.5b")
    fp = tokenizer_fingerprint(small_tok)
    table = NgramModTable(tokenizer_fingerprint=fp)
    for p in WARMUP_TURNS:
        run(small, small_tok, table, p, max_tokens)
    path = Path(tempfile.mkdtemp()) / "qwen.ngm"
    table.save(path)
    print(json.dumps({"table_occupancy_after_0.5b": table.occupancy(), "file": str(path)}))
    del small

    big, big_tok = load("qwen2.5-coder-1.5b")
    warm = NgramModTable.load(path, tokenizer_fingerprint=tokenizer_fingerprint(big_tok))
    cold = NgramModTable(tokenizer_fingerprint=fp)
    r_cold, cold_stats = run(big, big_tok, cold, TURN_1, max_tokens)
    r_warm, warm_stats = run(big, big_tok, warm, TURN_1, max_tokens)
    print(json.dumps({"turn1_cold": cold_stats, "turn1_warm": warm_stats,
                      "same_tokens": r_cold.tokens == r_warm.tokens}))


if __name__ == "__main__":
    main()
