"""Tests for specdec.loader: real packaged models checked against llama.cpp, plus tiny
synthetic GGUF files that check name mapping / q-k permutation / Gemma norm offset
independently of any real model.

Run with OpenBLAS preloaded (mlx-cpu's bundled BLAS is ~30x slower):
  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
      python -m pytest tests/loader/test_api.py -q
Real models convert once into the user's cache ($SPECDEC_CACHE_DIR or ~/.cache/specdec);
tests that must observe a first conversion use a private temporary cache.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

import gguf
import mlx.core as mx

import mlx.nn as nn  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402
from gguf.quants import quantize as gguf_quantize  # noqa: E402
from conftest import INSTALL_PEERS, real_model, requires, requires_model  # noqa: E402
from mlx.utils import tree_flatten, tree_unflatten  # noqa: E402

from specdec.loader import ModelLoadError, load, packaged_gguf_path  # noqa: E402
from specdec.loader import convert as loader_convert  # noqa: E402
from specdec.loader.api import _apply_dtype  # noqa: E402
from specdec.bench.peers import llama_cpp_scores  # noqa: E402

MIN_ARGMAX_AGREEMENT = 0.90


# --------------------------------------------------------------------------------------
# Tiny synthetic GGUF files. The writer below applies llama.cpp's converter transforms in
# the *forward* direction (its own code, not the loader's), so a loader that maps names
# or inverts the transforms wrongly produces a model that differs from the reference.
# --------------------------------------------------------------------------------------

H, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 4, 2, 16, 128


def _layers(arch: str) -> int:
    # mlx-lm's gemma3 needs one full period of the 6-layer sliding/global pattern
    return 6 if arch == "gemma3" else 2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_GGUF_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
}
_GGUF_TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
                   "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}


def _vocab() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values()) + ["Ġt", "he"] + SPECIALS


def _gguf_name(arch: str, hf: str) -> str:
    if hf in _GGUF_TOP_NAMES:
        return _GGUF_TOP_NAMES[hf]
    _, _, layer, rest = hf.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    if part == "post_attention_layernorm":
        gg = "post_attention_norm" if arch == "gemma3" else "ffn_norm"
    else:
        gg = _GGUF_LAYER_NAMES[part]
    return f"blk.{layer}.{gg}.{kind}"


def _hf_weights(arch: str, vocab: int, tied: bool, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.08).astype(np.float32)

    def norm(n):  # Gemma's RMSNorm scales by (1 + w), the others by w
        base = 0.0 if arch == "gemma3" else 1.0
        return (base + rng.standard_normal(n) * 0.1).astype(np.float32)

    w = {"model.embed_tokens.weight": mat(vocab, H), "model.norm.weight": norm(H)}
    if not tied:
        w["lm_head.weight"] = mat(vocab, H)
    for i in range(_layers(arch)):
        p = f"model.layers.{i}."
        w.update({
            p + "self_attn.q_proj.weight": mat(HEADS * HEAD_DIM, H),
            p + "self_attn.k_proj.weight": mat(KV_HEADS * HEAD_DIM, H),
            p + "self_attn.v_proj.weight": mat(KV_HEADS * HEAD_DIM, H),
            p + "self_attn.o_proj.weight": mat(H, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": mat(FFN, H),
            p + "mlp.up_proj.weight": mat(FFN, H),
            p + "mlp.down_proj.weight": mat(H, FFN),
            p + "input_layernorm.weight": norm(H),
            p + "post_attention_layernorm.weight": norm(H),
        })
        if arch == "qwen2":
            for t, n in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                w[p + f"self_attn.{t}_proj.bias"] = (rng.standard_normal(n * HEAD_DIM) * 0.1).astype(np.float32)
        if arch == "gemma3":
            w[p + "self_attn.q_norm.weight"] = norm(HEAD_DIM)
            w[p + "self_attn.k_norm.weight"] = norm(HEAD_DIM)
            w[p + "pre_feedforward_layernorm.weight"] = norm(H)
            w[p + "post_feedforward_layernorm.weight"] = norm(H)
    return w


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # what llama.cpp's convert_hf_to_gguf.py LlamaModel.permute does to q/k rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _to_gguf_layout(arch: str, name: str, w: np.ndarray) -> np.ndarray:
    if arch == "llama" and ".q_proj." in name:
        return _llama_cpp_permute(w, HEADS)
    if arch == "llama" and ".k_proj." in name:
        return _llama_cpp_permute(w, KV_HEADS)
    if arch == "gemma3" and name.endswith("norm.weight"):
        return w + np.float32(1.0)
    return w


def _roundtrip(w: np.ndarray, qtype) -> np.ndarray:
    return gguf_dequantize(gguf_quantize(w, qtype), qtype).reshape(w.shape).astype(np.float32)


def write_tiny_gguf(path: Path, arch: str, *, qtypes, tied=True, seed=0, chat=True):
    """Write a tiny random model; return (reference HF weights after quantization, config)."""
    vocab = _vocab()
    hf = _hf_weights(arch, len(vocab), tied, seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(256)
    writer.add_embedding_length(H)
    writer.add_block_count(_layers(arch))
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10_000.0)
    if arch == "gemma3":
        writer.add_key_length(HEAD_DIM)
        writer.add_value_length(HEAD_DIM)
        writer.add_sliding_window(4)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab)
    writer.add_token_types([1] * (len(vocab) - len(SPECIALS)) + [3] * len(SPECIALS))
    writer.add_token_merges(["Ġ t", "h e"])
    writer.add_bos_token_id(vocab.index("<|im_start|>"))
    writer.add_eos_token_id(vocab.index("<|endoftext|>"))
    if chat:
        writer.add_chat_template(CHAT_TEMPLATE)
    reference = {}
    for i, (name, w) in enumerate(sorted(hf.items())):
        qtype = Q.F32 if w.ndim == 1 else qtypes[i % len(qtypes)]
        stored = _to_gguf_layout(arch, name, w)
        data = gguf_quantize(stored, qtype)
        writer.add_tensor(_gguf_name(arch, name), data, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
        # block quantization runs along rows, so it commutes with the row permutation
        reference[name] = _roundtrip(w, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return reference, _reference_config(arch, len(vocab), tied)


def _reference_config(arch: str, vocab: int, tied: bool) -> dict:
    cfg = {
        "model_type": {"gemma3": "gemma3_text"}.get(arch, arch), "hidden_size": H,
        "num_hidden_layers": _layers(arch), "intermediate_size": FFN, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-5,
        "rope_theta": 10_000.0, "vocab_size": vocab, "tie_word_embeddings": tied,
        "max_position_embeddings": 256,
    }
    if arch == "gemma3":
        cfg.update(sliding_window=4, sliding_window_pattern=6, query_pre_attn_scalar=HEAD_DIM,
                   rope_local_base_freq=10_000.0)
    return cfg


def reference_model(config: dict, weights: dict[str, np.ndarray]):
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    model = module.Model(module.ModelArgs.from_dict(config))
    ws = model.sanitize({k: mx.array(v) for k, v in weights.items()})
    model.load_weights(list(ws.items()))
    mx.eval(model.parameters())
    return model


SYNTHETIC_CASES = {
    "llama-tied-q4_0-q8_0-f16": ("llama", (Q.Q4_0, Q.Q8_0, Q.F16), True),
    "llama-untied-q4_1-bf16-f32": ("llama", (Q.Q4_1, Q.BF16, Q.F32), False),
    "qwen2-q5_0-q8_0-f16": ("qwen2", (Q.Q5_0, Q.Q8_0, Q.F16), True),
    "gemma3-q8_0-q4_0": ("gemma3", (Q.Q8_0, Q.Q4_0), True),
}


@pytest.mark.parametrize("case", list(SYNTHETIC_CASES))
def test_synthetic_gguf_matches_mlx_lm_reference(case, tmp_path, tmp_cache):
    arch, qtypes, tied = SYNTHETIC_CASES[case]
    path = tmp_path / f"{case}.gguf"
    weights, config = write_tiny_gguf(path, arch, qtypes=qtypes, tied=tied, seed=len(case))
    model, tok = load(str(path))
    ref = reference_model(config, weights)
    assert type(model) is type(ref)

    ours, theirs = dict(tree_flatten(model.parameters())), dict(tree_flatten(ref.parameters()))
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert ours[k].dtype == mx.float32, k
        np.testing.assert_allclose(np.array(ours[k]), np.array(theirs[k]), atol=1e-6, err_msg=k)

    ids = mx.array([[5, 70, 256, 12, 99, 3, 200, 41, 8, 150, 77, 9]])
    np.testing.assert_allclose(np.array(model(ids)), np.array(ref(ids)), atol=1e-4, rtol=1e-4)


def test_converted_directory_loads_as_mlx_lm_dir(tmp_path, tmp_cache):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "qwen2", qtypes=(Q.Q8_0, Q.F16))
    model, _ = load(str(path))
    again, tok = load(str(loader_convert.converted_dir(path)))
    ids = mx.array([[1, 2, 3, 4, 5]])
    np.testing.assert_array_equal(np.array(model(ids)), np.array(again(ids)))
    assert tok.chat_template is not None


def test_dtypes(tmp_path, tmp_cache):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", qtypes=(Q.Q4_0,))
    model, _ = load(str(path), dtype="bfloat16")
    floats = [v.dtype for _, v in tree_flatten(model.parameters())]
    assert set(floats) == {mx.bfloat16}
    with pytest.raises(ModelLoadError, match="Unknown dtype 'int8'.*float16"):
        load(str(path), dtype="int8")


def test_float32_on_cpu_stores_weights_column_major_with_the_same_logits(tmp_path, tmp_cache):
    # loader.api.column_major_weights: W.T row-major makes mlx-cpu's sgemm faster; the
    # products must not change by one bit, and cost curves are kept apart per layout.
    from specdec.measure import model_fingerprint

    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", qtypes=(Q.Q8_0, Q.F16), tied=True)
    model, _ = load(str(path))
    mats = {p: m.weight for p, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Embedding))}
    assert len(mats) >= 8 and all(memoryview(w).f_contiguous and not memoryview(w).c_contiguous
                                  for w in mats.values()), {p: memoryview(w).strides for p, w in mats.items()}
    ids = mx.array([[5, 70, 256, 12, 99, 3, 200, 41, 8, 150, 77, 9]])
    relaid, relaid_key = model(ids), model_fingerprint(model)
    model.update(tree_unflatten([(f"{p}.weight", mx.contiguous(w)) for p, w in mats.items()]))
    del model.specdec_weight_layout
    assert all(memoryview(m.weight).c_contiguous for m in model.modules() if isinstance(m, nn.Linear))
    assert mx.array_equal(relaid, model(ids)).item()  # bit for bit
    assert model_fingerprint(model) != relaid_key
    half, _ = load(str(path), dtype="bfloat16")  # float32 only: other dtypes stay as loaded
    assert not hasattr(half, "specdec_weight_layout")
    write_tiny_gguf(path, "llama", qtypes=(Q.Q8_0, Q.F16), tied=False)
    untied, _ = load(str(path))  # its table is only gathered: left row-major
    assert memoryview(untied.model.embed_tokens.weight).c_contiguous
    assert memoryview(untied.lm_head.weight).f_contiguous


def test_gpu_policy_requantizes_low_bit_gguf(tmp_path, tmp_cache):
    # dtype "auto" on a GPU backend means: 4-bit for <=4-bit GGUFs, else float16. The
    # policy itself is backend-independent, so exercise it directly on CPU.
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", qtypes=(Q.Q4_0,))
    model, _ = load(str(path), dtype="float32")
    ids = mx.array([[1, 2, 3, 4, 5, 6]])
    expected = np.array(model(ids))
    _apply_dtype(model, None, {"low_bit": True})
    assert isinstance(model.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    assert np.corrcoef(np.array(model(ids).astype(mx.float32)).ravel(), expected.ravel())[0, 1] > 0.98

    model, _ = load(str(path), dtype="float32")
    _apply_dtype(model, None, {"low_bit": False})
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.float16}


# ------------------------------------------------------------------ user-facing errors


def test_missing_packaged_model_says_pip_install(monkeypatch):
    """A registry entry whose chunk packages are not installed (names that exist nowhere,
    so the test holds whatever this machine has installed)."""
    from specdec.loader import registry

    parts = ("specdec-absent-part1", "specdec-absent-part2")
    absent = registry.PackagedModel(name="absent-model", description="test entry",
                                    packages=parts, gguf_name="absent.gguf",
                                    has_chat_template=False, chunks=parts, extra="models-large")
    monkeypatch.setitem(registry.PACKAGED_MODELS, "absent-model", absent)
    with pytest.raises(ModelLoadError) as err:
        load("absent-model")
    msg = str(err.value)
    assert "pip install 'specdec[models-large]'" in msg
    assert "specdec-absent-part1" in msg and "specdec-absent-part2" in msg
    assert registry.PACKAGED_MODELS["qwen2.5-coder-1.5b"].extra == "models-large"


def test_unknown_name_lists_packaged_models():
    with pytest.raises(ModelLoadError, match="Unknown model 'no-such-model'.*smollm2-135m"):
        load("no-such-model")


def test_bad_paths(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        load(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelLoadError, match="not found"):
        load("./no/such/dir")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load(str(tmp_path))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        load(str(junk))
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(ModelLoadError, match="neither a GGUF file nor a model directory"):
        load(str(txt))


def test_unreachable_hf_repo_id(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="Hugging Face repo id"):
        load("specdec-tests/no-such-model-xyz")


def test_broken_mlx_directory(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelLoadError, match="complete mlx-lm model"):
        load(str(tmp_path))


def test_unsupported_architecture(tmp_path, tmp_cache):
    path = tmp_path / "phi.gguf"
    writer = gguf.GGUFWriter(str(path), "phi2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match="architecture 'phi2'.*llama, qwen2, gemma3"):
        load(str(path))


# ------------------------------------------------------------------ real packaged models


# llama-cpp-python is the bench's optional peer (built portably by `make install-peers`);
# its logits are computed in a child process, so a build for another CPU fails the test
# with the signal's name instead of killing pytest.
NEEDS_LLAMA_CPP = requires("llama-cpp-python", pip=INSTALL_PEERS)


def llama_cpp_agreement(model, gguf_path: Path, ids: list[int]) -> tuple[float, float]:
    """(argmax agreement, mean per-position logit correlation) against llama.cpp."""
    with tempfile.TemporaryDirectory() as tmp:
        ref = np.load(llama_cpp_scores(str(gguf_path), ids, f"{tmp}/scores.npy"))
    ours = np.array(model(mx.array([ids]))[0].astype(mx.float32))
    agree = float((ref.argmax(-1) == ours.argmax(-1)).mean())
    corr = float(np.mean([np.corrcoef(ref[i], ours[i])[0, 1] for i in range(len(ids))]))
    print(f"\n{gguf_path.name}: {len(ids)} tokens, argmax agreement {agree:.1%}, "
          f"mean logit correlation {corr:.5f}")
    return agree, corr


def greedy(model, tok, prompt: str, n: int = 24) -> str:
    from mlx_lm import generate

    return generate(model, tok, prompt, max_tokens=n)


# the session's loads (conftest.real_model: the same load(name), shared with every module
# that runs these models, e.g. tests/parity, test_kv_budget): a Gemma or Qwen load is seconds
@pytest.fixture(scope="module")
def smollm2():
    return real_model("smollm2-135m")


@pytest.fixture(scope="module")
def gemma3():
    return real_model("gemma3-270m")


@pytest.fixture(scope="module")
def qwen05():
    return real_model("qwen2.5-coder-0.5b")


def _chat(tok, text: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": text}],
                                   add_generation_prompt=True, tokenize=False)


ROMAN = ("The history of the Roman Empire spans many centuries. It began when Augustus "
         "became the first emperor in 27 BC, and the western half fell in 476 AD. During "
         "this time, the empire")


@pytest.mark.slow
def test_smollm2_loads_and_answers(smollm2):
    model, tok = smollm2
    assert type(model).__module__ == "mlx_lm.models.llama"
    assert tok.eos_token_ids == {tok.convert_tokens_to_ids("<|im_end|>")}
    assert {v.dtype for _, v in tree_flatten(model.parameters())} == {mx.float32}
    out = greedy(model, tok, _chat(tok, "What is the capital of France?"))
    assert "Paris" in out, out


@pytest.mark.slow
@NEEDS_LLAMA_CPP
def test_smollm2_logits_match_llama_cpp(smollm2):
    model, tok = smollm2
    prompt = _chat(tok, "Explain in two sentences why the sky is blue, and name the physicist "
                        "who described it.")
    ids = tok.encode(prompt, add_special_tokens=False)
    assert 35 <= len(ids) <= 60
    agree, corr = llama_cpp_agreement(model, packaged_gguf_path("smollm2-135m"), ids)
    assert agree >= MIN_ARGMAX_AGREEMENT and corr > 0.99


@pytest.mark.slow
def test_second_load_reuses_cache(smollm2):
    before = loader_convert.conversion_count()
    load("smollm2-135m")
    assert loader_convert.conversion_count() == before
    marker = loader_convert.converted_dir(packaged_gguf_path("smollm2-135m")) / "specdec.json"
    assert loader_convert.read_marker(marker.parent)["file_type"] == "MOSTLY_Q4_1"


@pytest.mark.slow
@NEEDS_LLAMA_CPP
@requires_model("gemma3-270m")
def test_gemma3_logits_match_llama_cpp(gemma3):
    model, tok = gemma3
    assert type(model).__module__ == "mlx_lm.models.gemma3_text"
    ids = tok.encode(ROMAN)
    assert ids[0] == tok.bos_token_id  # base model: BOS added, as llama.cpp does
    agree, corr = llama_cpp_agreement(model, packaged_gguf_path("gemma3-270m"), ids)
    assert agree >= MIN_ARGMAX_AGREEMENT and corr > 0.99


@pytest.mark.slow
@requires_model("gemma3-270m")
def test_gemma3_base_model_continues_text(gemma3):
    model, tok = gemma3
    assert tok.chat_template is None
    assert tok.eos_token_ids == {tok.convert_tokens_to_ids("<eos>")}
    assert "Paris" in greedy(model, tok, "The Eiffel Tower is located in the city of", n=8)


@pytest.mark.slow
@NEEDS_LLAMA_CPP
@requires_model("qwen2.5-coder-0.5b")
def test_qwen_coder_logits_match_llama_cpp(qwen05):
    model, tok = qwen05
    assert type(model).__module__ == "mlx_lm.models.qwen2"
    assert tok.eos_token_ids == {tok.convert_tokens_to_ids("<|im_end|>"),
                                 tok.convert_tokens_to_ids("<|endoftext|>")}
    ids = tok.encode(_chat(tok, "Write a Python function that reverses a string."),
                     add_special_tokens=False)
    agree, corr = llama_cpp_agreement(model, packaged_gguf_path("qwen2.5-coder-0.5b"), ids)
    assert agree >= MIN_ARGMAX_AGREEMENT and corr > 0.99


@pytest.mark.slow
@requires_model("gemma3-270m")
def test_chunked_model_assembled_once(tmp_cache):
    path = packaged_gguf_path("gemma3-270m")
    assert path.parent == tmp_cache / "gguf"
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    first = path.stat()
    assert packaged_gguf_path("gemma3-270m").stat().st_mtime_ns == first.st_mtime_ns
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]


@pytest.mark.slow
@requires_model("gemma3-270m")
def test_reassembling_a_chunked_model_keeps_its_conversion_key(tmp_path, monkeypatch):
    """Two processes assembling the same chunked GGUF at once (the ranks of an mlx.launch
    group) must agree on the conversion key: a fresh mtime each time made one rank prune
    the other's conversion while it was loading it."""
    from specdec.loader.cache import source_key
    from specdec.loader.registry import packaged_gguf_path

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    first = packaged_gguf_path("gemma3-270m")
    key = source_key(first, 1)
    for stamp in first.parent.glob("*.stamp.json"):
        stamp.unlink()  # force a second assembly, as a concurrent process would do
    os.utime(first, ns=(1, 1))
    again = packaged_gguf_path("gemma3-270m")
    assert again == first and source_key(again, 1) == key
