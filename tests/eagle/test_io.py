"""Published-format heads: fixtures written with the EAGLE repo's (``midlayer.*``) and
SpecForge / vLLM (``layers.0.*``, ``model.``-prefixed) key names and torch shapes load into the
same head; ours round-trip save -> load with identical logits and drafts."""

from __future__ import annotations

import json
import re

import mlx.core as mx
import numpy as np
import pytest
from safetensors.numpy import save_file

from specdec.eagle.io import HeadFormatError, chain_k, config_from_json, load_head, save_head

from .conftest import VOCAB, tiny_head, tiny_target

H, DV, I = 32, 40, 64


def published_arrays(seed: int = 3) -> dict[str, np.ndarray]:
    """EAGLE-3 weights named as the EAGLE repo names them, torch (out, in) shapes."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float16)  # noqa: E731
    layer = {"self_attn.q_proj.weight": w(H, 2 * H), "self_attn.k_proj.weight": w(H // 2, 2 * H),
             "self_attn.v_proj.weight": w(H // 2, 2 * H), "self_attn.o_proj.weight": w(H, H),
             "mlp.gate_proj.weight": w(I, H), "mlp.up_proj.weight": w(I, H),
             "mlp.down_proj.weight": w(H, I), "input_layernorm.weight": 1 + w(H),
             "hidden_norm.weight": 1 + w(H), "post_attention_layernorm.weight": 1 + w(H)}
    used = np.sort(rng.choice(VOCAB, DV, replace=False))
    t2d = np.zeros(VOCAB, dtype=bool)
    t2d[used] = True
    out = {f"midlayer.{k}": v for k, v in layer.items()}
    out.update({"fc.weight": w(H, 3 * H), "norm.weight": 1 + w(H), "lm_head.weight": w(DV, H),
                "d2t": (used - np.arange(DV)).astype(np.int64), "t2d": t2d})
    return out


def _config(**extra):
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": I, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "vocab_size": VOCAB,
            "draft_vocab_size": DV, "max_position_embeddings": 2048, "torch_dtype": "float16", **extra}


def write_eagle_repo_layout(d, arrays):
    d.mkdir()
    save_file(arrays, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(_config()))


def write_layers0_layout(d, arrays, embed):
    d.mkdir()
    renamed = {("model.layers.0." + k[len("midlayer."):]) if k.startswith("midlayer.") else k: v
               for k, v in arrays.items()}
    renamed["embed_tokens.weight"] = embed
    save_file(renamed, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(_config(
        target_hidden_size=H, eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 3, 3]})))


def _probe(head):
    mx.random.seed(11)
    feats = mx.random.normal((1, 5, 3 * H))
    toks = mx.random.randint(0, VOCAB, (1, 5))
    hid = head.step(toks, head.fuse(feats), "causal", None)
    return head.logits(hid), head.draft(head.make_cache(), feats, toks, 4).tokens


def test_both_published_layouts_load_identically(tmp_path):
    target = tiny_target("llama")
    arrays = published_arrays()
    write_eagle_repo_layout(tmp_path / "eagle", arrays)
    embed = np.array(target.model.embed_tokens.weight)
    write_layers0_layout(tmp_path / "specforge", arrays, embed)
    a = load_head(tmp_path / "eagle", target)
    b = load_head(tmp_path / "specforge", target)
    assert a.config.aux_layer_ids == (2, 3, 3) == b.config.aux_layer_ids  # default 2, L/2, L-3
    assert not a.shipped_embeddings and b.shipped_embeddings
    assert np.array_equal(np.array(a.fc.weight), arrays["fc.weight"].astype(np.float32))
    assert np.array_equal(np.array(a.midlayer.self_attn.q_proj.weight),
                          arrays["midlayer.self_attn.q_proj.weight"].astype(np.float32))
    la, da = _probe(a)
    lb, db = _probe(b)
    assert mx.array_equal(la, lb) and da == db
    assert all(arrays["t2d"][t] for t in da)


def test_round_trip_keeps_logits_and_published_keys(tmp_path):
    target = tiny_target("llama")
    head = tiny_head(target)
    size = save_head(head, tmp_path / "ours")
    with open(tmp_path / "ours" / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert "midlayer.self_attn.q_proj.weight" in header and "embed_tokens.weight" not in header
    assert header["d2t"]["dtype"] == "I64" and header["t2d"]["dtype"] == "BOOL"
    cfg = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 48
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    back = load_head(tmp_path / "ours", target)
    assert size == (tmp_path / "ours" / "model.safetensors").stat().st_size
    l0, d0 = _probe(head)
    l1, d1 = _probe(back)
    assert mx.array_equal(l0, l1) and d0 == d1


def test_load_errors_say_what_is_wrong(tmp_path):
    target = tiny_target("llama")
    with pytest.raises(HeadFormatError, match="config.json and model.safetensors"):
        load_head(tmp_path, target)
    arrays = published_arrays()
    write_eagle_repo_layout(tmp_path / "noembed", arrays)
    with pytest.raises(HeadFormatError, match="eagle_aux_hidden_state_layer_ids"):
        load_head(tmp_path / "noembed")
    del arrays["fc.weight"]
    write_eagle_repo_layout(tmp_path / "broken", arrays)
    with pytest.raises(HeadFormatError, match="does not match"):
        load_head(tmp_path / "broken", target)


@pytest.mark.parametrize("extra, k", [({}, None), ({"draft_acceptance": [0.46, 0.21, 0.08]}, 2),
                                      ({"draft_acceptance": [0.24, 0.06, 0.01]}, 1),
                                      ({"draft_acceptance": [0.05]}, 1),  # never below 1
                                      ({"draft_acceptance": [0.6, 0.4, 0.2]}, 3),
                                      ({"chain_k": 4, "draft_acceptance": [0.24, 0.06]}, 4)])
def test_a_heads_cap_in_a_chain_follows_its_acceptance_by_position_or_its_chain_k(extra, k):
    assert chain_k(config_from_json(_config(**extra), 4)) == k


def test_a_bad_chain_k_is_refused_at_load_saying_what_to_do(tmp_path):
    """Refused when the head is loaded, not later when a chain's drafter is built per request."""
    target, arrays = tiny_target("llama"), published_arrays()
    for i, bad in enumerate([0, -1, 2.5, "2", True]):
        d = tmp_path / f"bad{i}"
        write_eagle_repo_layout(d, arrays)
        (d / "config.json").write_text(json.dumps(_config(chain_k=bad)))
        with pytest.raises(HeadFormatError, match=re.escape(f"{d}/config.json") + ".*chain_k must be an integer >= 1.*fix"):
            load_head(d, target)
        with pytest.raises(HeadFormatError, match="chain_k must be an integer >= 1"):
            chain_k(config_from_json(_config(chain_k=bad), 4))
