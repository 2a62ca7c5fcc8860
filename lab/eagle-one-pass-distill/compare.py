"""Compare two `train-drafter --distill-only` data directories shard by shard (same prompts):
answers, top-k ids and log-probs, features; and count the stored positions (data tokens).

    python lab/eagle-one-pass-distill/compare.py BEFORE/data AFTER/data
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from specdec.eagle.data import Sample, read_shard

FIELDS = ("tokens", "features", "topk_ids", "topk_logp", "answer")


def _cut(s: Sample, n: int) -> Sample:
    return Sample(*(getattr(s, k)[:n] for k in FIELDS))


def main(before: Path, after: Path) -> None:
    names = sorted(p.name for p in before.glob("*.safetensors"))
    if names != sorted(p.name for p in after.glob("*.safetensors")):
        raise SystemExit("the two directories hold different shards (other prompts?)")
    out = dict(samples=0, positions=0, answer_tokens=0, same_answers=0, top1_equal=0, topk_equal=0,
               logp_max_abs=0.0, feature_max_rel=0.0)
    for name in names:
        for a, b in zip(read_shard(before / name), read_shard(after / name)):
            out["samples"] += 1
            out["positions"] += len(b.tokens)
            out["answer_tokens"] += int((b.answer > 0).sum())
            same = np.array_equal(a.tokens, b.tokens)
            out["same_answers"] += same
            if not same:  # past the first differing token it is other text: compare up to it
                m = min(len(a.tokens), len(b.tokens))
                n = int(np.argmax(a.tokens[:m] != b.tokens[:m])) if (a.tokens[:m] != b.tokens[:m]).any() else m
                a, b = _cut(a, n), _cut(b, n)
            out["top1_equal"] += int((a.topk_ids[:, 0] == b.topk_ids[:, 0]).sum())
            out["topk_equal"] += int((a.topk_ids == b.topk_ids).all(-1).sum())
            lp = np.abs(a.topk_logp.astype(np.float32) - b.topk_logp.astype(np.float32))
            out["logp_max_abs"] = max(out["logp_max_abs"], float(lp.max()))
            fa, fb = a.features.astype(np.float32), b.features.astype(np.float32)
            rel = np.abs(fa - fb) / np.abs(fa).max(-1, keepdims=True)
            out["feature_max_rel"] = max(out["feature_max_rel"], float(rel.max()))
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
