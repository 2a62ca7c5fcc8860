"""Offline acceptance of heads on SmolLM2's own answers to specbench_live.py's 6 Spec-Bench
questions (first turn, greedy, 128 tokens): the answers and features are built once by the
training pipeline (``batch_answerer``, ``samples_of``) into OUT/heldout_<category>.safetensors,
then each head (a head directory, or RUN_DIR/checkpoint with --vocab-from HEAD) is scored by
the trainer's held-out evaluation (``trainer.evaluate``, k = 5), all 6 together. Measurement
only: these questions are the test set, never training data.

Usage: python lab/eagle-head-tokens-per-forward/specbench_shards.py OUT HEAD_DIR ...
         [--heldout SHARD] [--checkpoint RUN_DIR --vocab-from HEAD_DIR]"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specdec.bench import specbench as sb
from specdec.core.arrays import load_arrays
from specdec.core.text import encode_prompt
from specdec.eagle.data import DataSpec, batch_answerer, samples_of, write_shard
from specdec.eagle.io import load_head
from specdec.eagle.train import DraftVocab
from specdec.eagle.trainer import TrainConfig, TrainData, evaluate
from specdec.loader import load

ORDER = ("qa", "math_reasoning", "translation", "summarization", "rag", "mt_bench")


def build(model, tok, out: Path, layer_ids) -> list[Path]:
    paths = [out / f"heldout_{c}.safetensors" for c in ORDER]
    if all(p.exists() for p in paths):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    pick = {q.category: q for q in sb.stratified(sb.questions(), 1)}
    prompts = [encode_prompt(tok, pick[c].turns[0]) for c in ORDER]
    answer = batch_answerer(model, 128, tok.eos_token_ids)
    answers = [answer([p])[0] for p in prompts]  # one by one: no padding, plain greedy's tokens
    for p, ids, ans in zip(paths, prompts, answers):
        write_shard(p, samples_of(model, [ids], [ans], DataSpec(tuple(layer_ids), max_len=4096)))
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("heads", nargs="*")
    ap.add_argument("--heldout", action="append", default=[])
    ap.add_argument("--checkpoint")
    ap.add_argument("--vocab-from")
    a = ap.parse_args()
    model, tok = load("smollm2-135m", dtype="float32")
    heads = [(h, load_head(h, model)) for h in a.heads]
    if a.checkpoint:
        head = load_head(a.vocab_from, model)
        ck = Path(a.checkpoint) / "checkpoint"
        head.load_weights(list(load_arrays(str(ck / "head.safetensors")).items()), strict=False)
        step = json.loads((ck / "state.json").read_text())["step"]
        heads.append((f"{a.checkpoint}@{step}", head))
    shards = build(model, tok, Path(a.out), heads[0][1].config.aux_layer_ids)
    cfg = TrainConfig(eval_steps=5)
    for name, head in heads:
        vocab = DraftVocab.of_head(head)
        row = {"head": name, "specbench6": [round(x, 3) for x in evaluate(head, TrainData([], shards, vocab), cfg)]}
        for h in a.heldout:
            row["heldout"] = [round(x, 3) for x in evaluate(head, TrainData([], [Path(h)], vocab), cfg)]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
