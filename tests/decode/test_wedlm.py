"""WeDLM on tiny random-weight qwen3-shaped models (fp32, CPU): the reordered forward, the
lossy parallel decoder, the lossless drafter and the checkpoint loader (issue #37)."""

from __future__ import annotations

import json
import subprocess
import sys

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models import qwen3
from mlx_lm.models.cache import make_prompt_cache

from specdec.backend import preload_env
from specdec.core.sampling import SamplingParams
from specdec.core.wedlm import WedlmSettings, settings_of
from specdec.decode.wedlm import WedlmStats, generate_wedlm, reordered_logits, wedlm_stream
from specdec.drafters.wedlm import WedlmDrafter
from specdec.drafters.spec import DraftSpec
from specdec.engine import token_stream
from specdec.resources import drafter_for
from specdec.loader import ModelLoadError
from specdec.loader.wedlm import load_wedlm

VOCAB, MASK = 64, 63
CFG = dict(model_type="qwen3", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
           num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
           vocab_size=VOCAB, max_position_embeddings=512, rope_theta=10000.0,
           tie_word_embeddings=False)
PROMPT = [3, 17, 5, 9, 40, 2, 11]
_models: dict = {}


def tiny(seed: int = 0, scale: float = 0.5):
    if (seed, scale) not in _models:
        m = qwen3.Model(qwen3.ModelArgs.from_dict(CFG))
        mx.random.seed(seed)  # test fixture weights only; the code under test takes no global rng
        m.update(tree_map(lambda p: mx.random.normal(p.shape) * scale, m.parameters()))
        mx.eval(m.parameters())
        _models[(seed, scale)] = m
    return _models[(seed, scale)]


def ar(model, prompt, n=40, **kw):
    return [e.token for e in token_stream(model, prompt, max_tokens=n, **kw)]


def with_drafter(model, prompt, k, n=40, threshold=float("inf"), **kw):
    d = WedlmDrafter(WedlmSettings(mask_token_id=MASK, entropy_threshold=threshold))
    out = [e.token for e in token_stream(model, prompt, drafter=d, max_tokens=n,
                                         num_draft_tokens=k, **kw)]
    return out, d


def _custom_mask(cache, rank):
    """Logical-order block mask reproducing the reordered attention: j visible to i iff
    rank[j] <= rank[i] (observed tokens first, masks after)."""
    r = mx.array(rank)
    for c in cache:
        c.make_mask = (lambda c: lambda N, **_: mx.concatenate(
            [mx.ones((N, c.offset), dtype=mx.bool_), r[None, :] <= r[:, None]], axis=1))(c)


def test_reordered_forward_equals_logical_forward():
    model = tiny()
    tokens = [7, MASK, 30, MASK, MASK, 12]  # window: filled at 0, 2, 5
    order = [0, 2, 5, 1, 3, 4]
    a = make_prompt_cache(model)
    model(mx.array(PROMPT)[None], cache=a)
    got = reordered_logits(model, a, [tokens[i] for i in order], order)
    b = make_prompt_cache(model)
    model(mx.array(PROMPT)[None], cache=b)
    _custom_mask(b, [order.index(i) for i in range(len(tokens))])
    want = model(mx.array(tokens)[None], cache=b)[0]
    for row, i in enumerate(order):
        assert mx.allclose(got[row], want[i], atol=1e-4).item(), (row, i)


def mask_greedy(model, prompt, n):
    """Reference for W = 1: each token is the argmax of one mask after prompt + output."""
    out = []
    for _ in range(n):
        logits = model(mx.array(prompt + out + [MASK])[None])[0, -1]
        out.append(int(mx.argmax(logits).item()))
    return out


class _CountingMx:
    """mlx.core with ``eval`` counted: the decoder's only way to wait for the device (its
    ``tolist`` calls read arrays already evaluated)."""

    def __init__(self):
        self.evals = 0

    def __getattr__(self, name):
        return getattr(mx, name)

    def eval(self, *arrays):
        self.evals += 1
        return mx.eval(*arrays)


def test_window_one_commits_one_mask_prediction_per_forward(monkeypatch):
    import specdec.decode.wedlm as wedlm

    counting = _CountingMx()
    monkeypatch.setattr(wedlm, "mx", counting)
    model, stats = tiny(), WedlmStats()
    out = list(wedlm_stream(model, PROMPT, WedlmSettings(mask_token_id=MASK, window=1),
                            max_tokens=12, stats=stats))
    assert out == mask_greedy(model, PROMPT, 12)
    assert counting.evals == stats.forwards + 1  # one host sync per step, one for the prompt
    assert stats.host_syncs == stats.forwards


def _assert_cache_is_prefill(model, cache, held):
    fresh = make_prompt_cache(model)
    model(mx.array(held)[None], cache=fresh)
    for c, f in zip(cache, fresh):
        assert c.offset == f.offset == len(held)
        for a, b in ((c.keys, f.keys), (c.values, f.values)):
            assert mx.allclose(a[..., :c.offset, :], b[..., :f.offset, :], atol=1e-4).item()


@pytest.mark.parametrize("window,threshold", [(4, 0.3), (16, 2.0), (8, 100.0)])
def test_cache_is_a_causal_prefill_after_every_commit(window, threshold):
    model = tiny()
    s = WedlmSettings(mask_token_id=MASK, window=window, entropy_threshold=threshold)
    cache, stats, out, checked = make_prompt_cache(model), WedlmStats(), [], 0
    for t in wedlm_stream(model, PROMPT, s, max_tokens=20, stats=stats, cache=cache):
        out.append(t)
        if cache[0].offset == len(PROMPT) + len(out):  # the end of a step's committed run
            _assert_cache_is_prefill(model, cache, PROMPT + out)
            checked += 1
    # every step's run was checked, but the last one when max_tokens cut it short
    assert len(out) == 20 and checked >= max(2, stats.commit_steps - 1)
    assert stats.host_syncs == stats.forwards  # one host sync per step
    assert 0 < stats.as_dict()["p_cache"] <= 1
    if threshold >= 100:  # every mask filled each step: W tokens per forward after the first
        assert stats.tokens_per_forward > 1


def test_eos_inside_the_window_stops():
    model = tiny()
    s = WedlmSettings(mask_token_id=MASK, window=8, entropy_threshold=100.0)
    full = list(wedlm_stream(model, PROMPT, s, max_tokens=20))
    stop = full[5]
    cut = list(wedlm_stream(model, PROMPT, s, max_tokens=20, eos=[stop]))
    assert cut == full[:full.index(stop)]


@pytest.mark.parametrize("k", [1, 4, 16])
@pytest.mark.parametrize("threshold", [0.3, 3.0, float("inf")])  # 1 draft .. the whole window
@pytest.mark.parametrize("seed", [0, 1])  # two models: different acceptance profiles
def test_lossless_drafter_equals_ar_greedy(k, threshold, seed):
    model = tiny(seed)
    out, d = with_drafter(model, PROMPT, k, threshold=threshold)
    assert out == ar(model, PROMPT)
    assert d.stats["proposals"] > 0
    if threshold == float("inf") and k > 1:  # whole windows (the engine caps k near the end)
        assert d.stats["drafted"] > d.stats["proposals"]


def test_lossless_drafter_equals_seeded_ar_sampling():
    model = tiny()
    sp = SamplingParams(temperature=0.8, seed=7)
    out, d = with_drafter(model, PROMPT, 4, sampling=sp)
    assert out == ar(model, PROMPT, sampling=sp)


def test_lossless_drafter_stops_at_eos_like_ar():
    model = tiny()
    ref = ar(model, PROMPT)
    eos = [ref[6]]
    out, _ = with_drafter(model, PROMPT, 8, eos=eos)
    assert out == ar(model, PROMPT, eos=eos) == ref[:ref.index(eos[0])]


def write_checkpoint(path, seed=0, wedlm=True):
    """A synthetic WeDLM directory: config.json (WeDLM's keys), model.safetensors, tokenizer."""
    from hybrid_tiny import DIR_VOCAB, write_tokenizer

    cfg = dict(CFG, vocab_size=DIR_VOCAB)
    m = qwen3.Model(qwen3.ModelArgs.from_dict(cfg))
    mx.random.seed(seed)
    m.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.3, m.parameters()))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(m.parameters())))
    if wedlm:
        cfg.update(model_type="wedlm", architectures=["WeDLMForDiffusionLM"], mask_token_id=270)
    (path / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(path)
    return path


def test_load_checkpoint_directory(tmp_path):
    ckpt = load_wedlm(write_checkpoint(tmp_path))
    assert ckpt.base == "qwen3" and ckpt.settings.mask_token_id == 270
    assert settings_of(ckpt.model).window == 16
    out = list(wedlm_stream(ckpt.model, [5, 6, 7], ckpt.settings, max_tokens=5))
    assert len(out) == 5


def test_non_wedlm_model_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a WeDLM model"):
        settings_of(tiny())
    with pytest.raises(ModelLoadError, match="not a WeDLM checkpoint"):
        load_wedlm(write_checkpoint(tmp_path, wedlm=False))


@pytest.mark.parametrize("draft_type", ["wedlm", "wedlm,suffix"])
def test_spec_built_drafter_with_gate_and_chain(tmp_path, monkeypatch, draft_type):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))  # the measured costs land here
    ckpt = load_wedlm(write_checkpoint(tmp_path))
    prompt = [5, 6, 7, 8, 9, 10]
    for gate in (True, False):
        d = drafter_for(DraftSpec(draft_type, gate=gate), ckpt.model, ckpt.tokenizer)
        out = [e.token for e in token_stream(ckpt.model, prompt, drafter=d, max_tokens=24,
                                             num_draft_tokens=8)]
        assert out == ar(ckpt.model, prompt, n=24), (draft_type, gate)


def test_wedlm_drafter_refuses_a_plain_model():
    with pytest.raises(ValueError, match="not a WeDLM model"):
        drafter_for(DraftSpec("wedlm", gate=False), tiny(), None)


def _cli(tmp_path, *args):
    env = dict(preload_env(), SPECDEC_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "specdec", "generate", "--prompt", "hello",
                           "--max-tokens", "12", "--json", *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.slow  # three CLI subprocesses (~9 s)
def test_cli_decoder_and_drafter_on_a_checkpoint_directory(tmp_path):
    (tmp_path / "ckpt").mkdir()
    d = str(write_checkpoint(tmp_path / "ckpt"))
    r = _cli(tmp_path, "--model", d, "--decoder", "wedlm", "--wedlm-window", "4")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["lossless"] is False and out["decoder"] == "wedlm" and out["forwards"] > 0
    for threshold in ("0.3", "1e9"):  # one-token drafts; whole windows
        r = _cli(tmp_path, "--model", d, "--draft-type", "wedlm", "--compare", "--no-gate",
                 "--entropy-threshold", threshold)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["parity"] is True


def test_cli_decoder_wedlm_refuses_a_plain_model(tmp_path, monkeypatch, capsys):
    """In process (a CLI subprocess was 3 s of import for one refusal): the CLI's exit 2."""
    from specdec.cli import main

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    d = str(write_checkpoint(tmp_path, wedlm=False))
    assert main(["generate", "--prompt", "hello", "--max-tokens", "12", "--json", "--model", d,
                 "--decoder", "wedlm"]) == 2
    assert "not a WeDLM model" in capsys.readouterr().err


@pytest.mark.slow  # a server subprocess
def test_server_answers_with_the_wedlm_drafter(tmp_path):
    """``specdec serve`` with ``--draft-type wedlm``: the same text as plain decoding."""
    from serverproc import Server

    (tmp_path / "ckpt").mkdir()
    d = str(write_checkpoint(tmp_path / "ckpt"))
    s = Server("--model", d, "--draft-type", "wedlm", env={"SPECDEC_CACHE_DIR": str(tmp_path)})
    try:
        with s.http() as http:
            def chat(**kw):
                r = http.post("/v1/chat/completions", json={
                    "model": d, "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 16, "temperature": 0, **kw})
                assert r.status_code == 200, r.text
                return r.json()
            plain = chat(speculative={"draft_type": "none"})
            drafted = chat(speculative={"gate": False})
        assert drafted["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
        assert drafted["usage"]["drafted_tokens"] > 0
    finally:
        s.stop()


def test_stop_string_inside_the_window(tmp_path):
    ckpt = load_wedlm(write_checkpoint(tmp_path, seed=2))  # seed 2: some ASCII in its output
    s = WedlmSettings(mask_token_id=270, window=8, entropy_threshold=100.0)
    full = generate_wedlm(ckpt.model, ckpt.tokenizer, "hello", s, max_tokens=24, chat=False)
    stop = next(ch for ch in full.text if ch.isascii() and ch.isalnum())  # not half a byte
    assert full.finish_reason == "length" and full.text.index(stop) > 0
    cut = generate_wedlm(ckpt.model, ckpt.tokenizer, "hello", s, max_tokens=24, chat=False,
                         stop=[stop])
    assert cut.finish_reason == "stop" and cut.text == full.text[:full.text.index(stop)]
    assert cut.to_dict()["lossless"] is False
