"""``specdec serve --decoder wedlm`` (issue #37): a real server subprocess on a tiny
random-weight WeDLM checkpoint answers with the same text as the library's decoder; seeded
sampling too; what the decoder cannot do gets a 400; a non-WeDLM model is refused at startup."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specdec.backend import preload_env
from specdec.core.wedlm import WedlmSettings
from specdec.decode.wedlm import generate_wedlm
from specdec.loader.wedlm import load_wedlm
from decode.test_wedlm import write_checkpoint

IDS = [5, 6, 7, 8, 9, 10]


@pytest.mark.slow
def test_server_answers_with_the_wedlm_decoder(tmp_path):
    from serverproc import Server

    (tmp_path / "ckpt").mkdir()
    d = str(write_checkpoint(tmp_path / "ckpt"))
    ckpt = load_wedlm(d)
    want = {w: generate_wedlm(ckpt.model, ckpt.tokenizer, IDS, WedlmSettings(
        mask_token_id=270, window=w, entropy_threshold=2.0), max_tokens=16) for w in (4,)}
    s = Server("--model", d, "--decoder", "wedlm", "--wedlm-window", "4",
               "--entropy-threshold", "2.0", env={"SPECDEC_CACHE_DIR": str(tmp_path)})
    try:
        with s.http() as http:
            def complete(**kw):
                return http.post("/v1/completions", json={
                    "model": d, "prompt": IDS, "max_tokens": 16, "temperature": 0, **kw})
            r = complete()
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["choices"][0]["text"] == want[4].text
            assert out["usage"]["completion_tokens"] == len(want[4].tokens)
            assert out["usage"]["lossless"] is False and out["usage"]["decoder"] == "wedlm"
            assert out["usage"]["forwards"] == want[4].stats.forwards
            with http.stream("POST", "/v1/completions", json={
                    "model": d, "prompt": IDS, "max_tokens": 16, "stream": True}) as st:
                assert st.status_code == 200
                body = "".join(st.iter_text())
            streamed = "".join(
                c["choices"][0]["text"] for c in _chunks(body) if c.get("choices"))
            assert streamed == want[4].text
            sampled = generate_wedlm(ckpt.model, ckpt.tokenizer, IDS, WedlmSettings(
                mask_token_id=270, window=4, entropy_threshold=2.0), max_tokens=16,
                temperature=0.9, seed=3)
            r = complete(temperature=0.9, seed=3)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == sampled.text
            for bad in ({"top_p": 0.5}, {"logprobs": 1}):
                r = complete(**bad)
                assert r.status_code == 400 and "--decoder wedlm" in r.text, (bad, r.text)
            _other_apis_report_the_decoder_stats(http, d)
    finally:
        s.stop()


def _other_apis_report_the_decoder_stats(http, model: str) -> None:
    """The Anthropic and Ollama answers carry the decoder's stats in their usage fields as
    the OpenAI chat answer does (the same greedy request: the same stats)."""
    from specdec.server.engine.events import DECODER_STATS

    msgs = [{"role": "user", "content": "abc abc"}]
    r = http.post("/v1/chat/completions", json={"model": model, "messages": msgs, "max_tokens": 12})
    assert r.status_code == 200, r.text
    want = {k: r.json()["usage"][k] for k in DECODER_STATS}
    assert want["lossless"] is False and want["forwards"] > 0
    r = http.post("/v1/messages", json={"model": model, "messages": msgs, "max_tokens": 12})
    assert r.status_code == 200, r.text
    assert {k: r.json()["usage"].get(k) for k in DECODER_STATS} == want
    r = http.post("/api/chat", json={"model": model, "messages": msgs, "stream": False,
                                     "options": {"num_predict": 12, "temperature": 0}})
    assert r.status_code == 200, r.text
    assert {k: r.json().get(k) for k in DECODER_STATS} == want


def _chunks(body: str) -> list[dict]:
    import json

    return [json.loads(line[6:]) for line in body.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def _serve(tmp_path, *args):
    from serverproc import free_port

    env = dict(preload_env(), SPECDEC_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "specdec", "serve", "--port", str(free_port()),
                           *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_serve_decoder_wedlm_refuses_a_plain_model(tmp_path):
    d = str(write_checkpoint(tmp_path, wedlm=False))
    r = _serve(tmp_path, "--model", d, "--decoder", "wedlm")
    assert r.returncode != 0 and "not a WeDLM model" in r.stderr, r.stderr[-2000:]
