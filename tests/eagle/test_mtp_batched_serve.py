"""8 concurrent server requests drafting with a checkpoint's own MTP block each equal their solo
answers (#47 Done-when), in process: a tiny random GLM-4.5-shaped (``glm4_moe``: attention
only, so rows batch) directory whose one ``model.safetensors`` holds the MTP layer as the
original checkpoint does (``model.layers.{n}.*``; mlx-lm's ``sanitize`` drops it on load), a real
``InferenceWorker`` started as ``specdec serve --model DIR --draft-type mtp`` (the block read
from the model's own directory), its batcher driven round by round (``Rounds``): all 8 decode in
one batch, each row's drafter over the one block, drafts accepted, every answer plain greedy's.
The target is near-Markov and the block knows it (``test_mtp.knowing_block``), so drafts are
accepted in full and in part, and every row rolls back its own rejected tail."""

from __future__ import annotations

import importlib
import json

import mlx.core as mx
from drafters.test_mtp import TARGETS, knowing_block, published
from hybrid_tiny import DIR_VOCAB, write_tokenizer
from mlx.utils import tree_flatten, tree_map, tree_map_with_path
from server.test_batcher import Rounds, chat_ids

from specdec.drafters.spec import DraftSpec
from specdec.engine import token_stream
from specdec.prompts import short_questions
from specdec.server.config import ServerConfig
from specdec.server.engine.worker import InferenceWorker
from specdec.server.http.metrics import Metrics


def glm_dir(path):
    """A GLM-4.5-shaped original checkpoint: the model's weights and its MTP layer (published
    names) in one file, config.json and a byte tokenizer."""
    arch, cfg = TARGETS["glm"]
    cfg = dict(cfg, model_type=arch, vocab_size=DIR_VOCAB)
    mod = importlib.import_module(f"mlx_lm.models.{arch}")
    model = mod.Model(mod.ModelArgs.from_dict(cfg))
    mx.random.seed(2)
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.5, model.parameters()))
    outs = ("o_proj.weight", "down_proj.weight")  # near-Markov: layers add 1 % of their output
    model.update(tree_map_with_path(lambda k, p: p * 0.01 if k.endswith(outs) else p, model.parameters()))
    head = knowing_block(model)
    path.mkdir()
    weights = dict(tree_flatten(model.parameters()), **published(head, cfg["num_hidden_layers"]))
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(path)
    return str(path)


def test_eight_requests_drafting_with_the_mtp_block_each_equal_their_solo_answer(tmp_path):
    d = glm_dir(tmp_path / "glm")
    assert any(k.startswith("model.layers.2.eh_proj") for k in mx.load(f"{d}/model.safetensors"))
    spec = DraftSpec("mtp", num_draft_tokens=3, gate=False)
    worker = InferenceWorker(ServerConfig(model=d, speculation=spec, save_interval=0, max_batch=8,
                                          context_length=512), Metrics())
    worker.load()
    assert worker.mtp is not None and worker.draft is None
    run, busy = Rounds(worker, max_batch=8), []
    jobs = [run.submit(chat_ids(worker, q), 8, spec) for q in short_questions(8)]
    run.finish(check=lambda: busy.append(worker.busy))
    assert max(busy) == 8  # all eight decoded together
    for job in jobs:
        ids = job.request.prompt_ids
        assert run.tokens(job) == [e.token for e in token_stream(worker.model, list(ids), max_tokens=8)]
    usage = [run.done(j).usage for j in jobs]
    assert all(u["drafted_tokens"] > 0 for u in usage)
    assert sum(u["accepted_tokens"] for u in usage) > 0, usage
