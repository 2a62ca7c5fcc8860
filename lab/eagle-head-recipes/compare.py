"""Training recipes compared on a short fixed budget from the same start (issue #47): the same
stored SmolLM2 features (/work/heads/smollm2-v2/data), the same shard order, schedule and seed as
the v3 run (4 epochs, batch 4, lr 1e-3, TTT 3), stopped after N shards (8 steps each), then
held-out acceptance by draft position (the trainer's own evaluate).

Usage: python lab/eagle-head-recipes/compare.py OUT_ROOT SHARDS VARIANT...
VARIANT: base | answer | init | answer+init (answer: loss on answer tokens only; init: decoder
layer from the target's last layer)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from specdec.eagle.pipeline import DrafterOptions, feature_rows, new_head, token_counts
from specdec.eagle.train import DraftVocab
from specdec.eagle.trainer import TrainConfig, TrainData, evaluate, train
from specdec.loader import load

DATA = Path("/work/heads/smollm2-v2/data")


def run(model, out: Path, shards: int, variant: str) -> dict:
    manifest = json.loads((DATA / "manifest.json").read_text())
    train_p = [DATA / n for n in manifest["train"]]
    held_p = [DATA / n for n in manifest["heldout"]]
    cfg = TrainConfig(epochs=4, answer_only="answer" in variant)
    opts = DrafterOptions(train=cfg, init_from_target="init" in variant)
    vocab = DraftVocab.from_counts(token_counts(train_p, model.args.vocab_size), opts.draft_vocab)
    head = new_head(model, vocab.ids, tuple(manifest["layer_ids"]), opts, cfg.seed,
                    features=feature_rows(train_p, 2048))
    vocab.apply(head)
    data = TrainData(train_p, held_p, vocab)
    t0 = time.time()
    train(head, cfg, data, out / variant, stop_after_shards=shards)
    acc = evaluate(head, data, cfg)
    return {"variant": variant, "steps": shards * 8, "acceptance": [round(a, 3) for a in acc],
            "train_s": round(time.time() - t0)}


def main() -> None:
    out, shards, variants = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    model, _ = load("smollm2-135m", dtype="float32")
    for v in variants:
        print(json.dumps(run(model, out, shards, v)), flush=True)


if __name__ == "__main__":
    main()
