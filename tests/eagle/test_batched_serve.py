"""8 concurrent server requests drafting with a head each equal their solo answers (#47
Done-when), in process: a real ``InferenceWorker`` loaded as ``specdec serve --model DIR
--draft-type mtp|eagle`` would load it, its batcher driven round by round (``Rounds``): all 8
decode in one batch, each row's drafter over the one head, drafts made, every answer plain
greedy's (the slow SmolLM2 variant: tests/server/test_batcher.py).

MTP: a tiny random GLM-4.5-shaped (``glm4_moe``: attention only, so rows batch) directory whose
one ``model.safetensors`` holds the MTP layer as the original checkpoint does
(``model.layers.{n}.*``; mlx-lm's ``sanitize`` drops it on load), the block read from the
model's own directory. The target is near-Markov and the block knows it
(``test_mtp.knowing_block``), so drafts are accepted in full and in part, and every row rolls
back its own rejected tail. EAGLE-3: a random head written in the published format
(``eagle.io.save_head``) for a tiny Qwen2 directory, read from ``--draft-model``."""

import importlib
import json

import mlx.core as mx
from drafters.test_mtp import TARGETS, knowing_block, published
from hybrid_tiny import DIR_VOCAB, save_dir, write_tokenizer
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


def eight_together(model_dir: str, spec: DraftSpec) -> list[dict]:
    """Eight chat requests through one worker's batcher, all in one batch: each row's tokens
    equal its prompt decoded plainly alone; returns their usage."""
    worker = InferenceWorker(ServerConfig(model=model_dir, speculation=spec, save_interval=0, max_batch=8,
                                          context_length=512), Metrics())
    worker.load()
    assert worker.draft is None and (worker.mtp if spec.uses("mtp") else worker.head) is not None
    run, busy = Rounds(worker, max_batch=8), []
    jobs = [run.submit(chat_ids(worker, q), 8, spec) for q in short_questions(8)]
    run.finish(check=lambda: busy.append(worker.busy))
    assert max(busy) == 8  # all eight decoded together
    for job in jobs:
        ids = job.request.prompt_ids
        assert run.tokens(job) == [e.token for e in token_stream(worker.model, list(ids), max_tokens=8)]
    usage = [run.done(j).usage for j in jobs]
    assert all(u["drafted_tokens"] > 0 for u in usage), usage
    return usage


def test_eight_requests_drafting_with_the_mtp_block_each_equal_their_solo_answer(tmp_path):
    d = glm_dir(tmp_path / "glm")
    assert any(k.startswith("model.layers.2.eh_proj") for k in mx.load(f"{d}/model.safetensors"))
    usage = eight_together(d, DraftSpec("mtp", num_draft_tokens=3, gate=False))
    assert sum(u["accepted_tokens"] for u in usage) > 0, usage


def test_eight_requests_drafting_with_a_published_eagle_head_each_equal_their_solo_answer(tmp_path):
    from specdec.eagle.head import Eagle3Head, HeadConfig
    from specdec.eagle.io import save_head
    from specdec.loader import load

    d = save_dir("qwen2", tmp_path / "qwen2")
    cfg = HeadConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                     vocab_size=DIR_VOCAB, draft_vocab_size=DIR_VOCAB, target_hidden_size=64,
                     aux_layer_ids=(0, 1, 1), rms_norm_eps=1e-5)
    mx.random.seed(4)
    head = Eagle3Head(cfg, load(str(d))[0].model.embed_tokens)
    head.t2d = mx.ones((DIR_VOCAB,), dtype=mx.bool_)
    save_head(head, tmp_path / "head")
    spec = DraftSpec("eagle", draft_model=str(tmp_path / "head"), num_draft_tokens=3, gate=False)
    eight_together(str(d), spec)
