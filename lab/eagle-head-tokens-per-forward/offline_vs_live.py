"""Is a head's live acceptance its offline (held-out) acceptance on the same text? (issue #47)

For each of specbench_live.py's 6 Spec-Bench questions (first turn, SmolLM2-135M fp32, greedy,
128 tokens): the target's plain greedy answer; the training pipeline's own feature capture over
prompt + answer (``data.samples_of``) scored by the trainer's held-out evaluation
(``trainer.evaluate``: P(drafts 1..j all right) over every answer position); and a live run
(the head alone, k = 5, every step drafting) recording each step's drafts, with

- live acceptance by position (accepted / drafted, as ``--compare`` prints),
- offline acceptance restricted to the positions the live steps drafted from (selection),
- how many live drafts equal the offline unroll's argmax at the same position (mismatch test:
  with no train/decode mismatch every draft whose earlier drafts were right is the same).

Usage: python lab/eagle-head-tokens-per-forward/offline_vs_live.py HEAD_DIR [--heldout SHARD]
Prints one JSON line per question and a total."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np

from specdec.bench import specbench as sb
from specdec.core.text import encode_prompt
from specdec.drafters.eagle import EagleDrafter
from specdec.eagle.data import DataSpec, read_shard, samples_of, write_shard
from specdec.eagle.io import load_head
from specdec.eagle.train import DraftVocab, make_batch, unroll
from specdec.eagle.trainer import TrainConfig, TrainData, evaluate
from specdec.engine import token_stream
from specdec.loader import load
from specdec.core.stats import SpecStats

ORDER = ("qa", "math_reasoning", "translation", "summarization", "rag", "mt_bench")
K = 5


class Recording(EagleDrafter):
    def __init__(self, head, eos):
        super().__init__(head, eos=eos)
        self.steps: list[tuple[int, list[int]]] = []

    def propose(self, context, k):
        p = super().propose(context, k)
        self.steps.append((len(context), list(p.tokens)))
        return p


def vocab_of(head) -> DraftVocab:
    d2t = np.array(head.d2t)
    return DraftVocab((np.arange(len(d2t)) + d2t).astype(np.int64), head.config.vocab_size)


def offline_drafts(head, sample, vocab) -> list[np.ndarray]:
    """The training unroll's argmax chain at every position (step j at t: token t+2+j)."""
    b = make_batch([sample], vocab.index())
    return [np.array(head.to_target(mx.argmax(lp, axis=-1)))[0] for lp, _ in unroll(head, b, K)]


def compare(seq, n_prompt, steps, off) -> dict:
    """Live steps vs the offline chain at the same position (step at context n reads t = n-2)."""
    acc, drafted = np.zeros(K, int), np.zeros(K, int)
    off_acc, same, compared = np.zeros(K, int), 0, 0
    for n, drafts in steps:
        t = n - 2
        ok_live = ok_off = True
        for j, d in enumerate(drafts):
            if n + j >= len(seq):
                break
            drafted[j] += 1
            ok_live = ok_live and d == seq[n + j]
            acc[j] += ok_live
            o = int(off[j][t])
            ok_off = ok_off and o == seq[n + j]
            off_acc[j] += ok_off
            if ok_live or j == 0:  # same inputs so far: the drafts must agree
                compared += 1
                same += d == o
    # offline over every answer position (as the held-out figure counts)
    allpos = np.zeros(K, int)
    ts = range(n_prompt - 1, len(seq) - 1 - K)
    for t in ts:
        ok = True
        for j in range(K):
            ok = ok and int(off[j][t]) == seq[t + 2 + j]
            allpos[j] += ok
    return {"live_accepted": acc.tolist(), "live_drafted": drafted.tolist(),
            "offline_at_live_positions": off_acc.tolist(), "offline_all_positions": allpos.tolist(),
            "offline_positions": len(ts), "drafts_compared": compared, "drafts_equal": same}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("head")
    p.add_argument("--heldout", help="a held-out shard to score the head on (the training figure)")
    p.add_argument("--only", nargs="*", default=list(ORDER), help="categories to run")
    a = p.parse_args()
    model, tok = load("smollm2-135m", dtype="float32")
    head = load_head(a.head, model)
    vocab = vocab_of(head)
    eos = frozenset(tok.eos_token_ids)
    cfg = TrainConfig(eval_steps=K)
    if a.heldout:
        print(json.dumps({"heldout": a.heldout, "evaluate": evaluate(
            head, TrainData([], [Path(a.heldout)], vocab), cfg)}), flush=True)
    pick = {q.category: q for q in sb.stratified(sb.questions(), 1)}
    spec = DataSpec(tuple(head.config.aux_layer_ids), max_len=4096)  # whole prompt + answer
    tot = {}
    with tempfile.TemporaryDirectory() as tmp:
        shards = []
        for cat in a.only:
            q = pick[cat]
            ids = encode_prompt(tok, q.turns[0])
            plain = [e.token for e in token_stream(model, ids, max_tokens=128, eos=eos)]
            drafter, stats = Recording(head, eos), SpecStats()
            live = [e.token for e in token_stream(model, ids, drafter=drafter, max_tokens=128,
                                                  num_draft_tokens=K, eos=eos, stats=stats)]
            sample = samples_of(model, [ids], [plain], spec)[0]
            path = Path(tmp) / f"heldout_{cat}.safetensors"
            write_shard(path, [sample])
            shards.append(path)
            row = {"q": q.question_id, "category": cat, "identical": live == plain,
                   "tokens": len(plain), "tokens_per_forward": round(stats.tokens_per_forward, 3),
                   "evaluate": [round(x, 3) for x in evaluate(head, TrainData([], [path], vocab), cfg)],
                   **compare(ids + plain, len(ids), drafter.steps,
                             offline_drafts(head, read_shard(path)[0], vocab))}
            print(json.dumps(row), flush=True)
            for k, v in row.items():
                if isinstance(v, list) and k != "evaluate":
                    tot[k] = (np.array(tot.get(k, np.zeros(K, int))) + v).tolist()
                elif isinstance(v, int) and not isinstance(v, bool) and k != "q":
                    tot[k] = tot.get(k, 0) + v
        tot["evaluate_all6"] = [round(x, 3) for x in evaluate(head, TrainData([], shards, vocab), cfg)]
        print(json.dumps({"total": tot}), flush=True)


if __name__ == "__main__":
    main()
