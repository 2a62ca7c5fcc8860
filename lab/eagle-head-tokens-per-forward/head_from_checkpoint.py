"""Write the head a still-running (or stopped) ``train-drafter`` run has reached: its last
checkpoint as config.json + model.safetensors in DEST, to decode with before training ends.

Usage: python lab/eagle-head-tokens-per-forward/head_from_checkpoint.py RUN_DIR DEST [--model M]
(RUN_DIR: the run's --output, holding data/manifest.json and checkpoint/; default draft
vocabulary 8192, as train-drafter's default; a run started with --init-head HEAD keeps that head's
vocabulary: pass --vocab-from HEAD)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlx.core as mx

from specdec.core.arrays import load_arrays
from specdec.eagle.io import load_head, save_head
from specdec.eagle.pipeline import DrafterOptions, new_head, token_counts
from specdec.eagle.train import DraftVocab
from specdec.loader import load


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run")
    p.add_argument("dest")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--draft-vocab", type=int, default=8192)
    p.add_argument("--vocab-from", help="the --init-head of the run: its vocabulary and layers")
    a = p.parse_args()
    run = Path(a.run)
    manifest = json.loads((run / "data" / "manifest.json").read_text())
    model, _ = load(a.model, dtype="float32")
    if a.vocab_from:
        head = load_head(a.vocab_from, model)
    else:
        vocab = DraftVocab.from_counts(token_counts([run / "data" / n for n in manifest["train"]],
                                                    model.args.vocab_size), a.draft_vocab)
        head = new_head(model, vocab.ids, tuple(manifest["layer_ids"]), DrafterOptions(), 0)
        vocab.apply(head)
    head.load_weights(list(load_arrays(str(run / "checkpoint" / "head.safetensors")).items()),
                      strict=False)
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    size = save_head(head, a.dest, dtype=mx.float16)
    print(f"wrote {a.dest} ({size / 2**20:.1f} MiB) from step {state['step']}")


if __name__ == "__main__":
    main()
