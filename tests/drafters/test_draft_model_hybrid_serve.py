"""Issue #35's server check, literally: ``specdec serve --draft-type model --draft-model``
with a hybrid target and a hybrid draft (tiny random-weight directories, ``hybrid_tiny``;
the draft is the target's weights plus seeded noise, so its drafts are accepted in part and
every roll-back length occurs) answers 16 concurrent chats exactly as ``specdec generate``
answers the same chat prompt with the same flags (the CLI's own ``--compare`` parity too).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import mlx.core as mx
import pytest
from hybrid_tiny import save_dir
from serverproc import Server

from specdec.backend import preload_env

WORDS = ["abc", "one two", "xyz", "hello", "cat", "red blue", "sun", "moon", "ab ba", "tick tock",
         "dog", "up down", "zig zag", "ping", "left right", "tree"]
PROMPTS = [f"{w} {w} {w} {w}" for w in WORDS]  # 16 distinct chat prompts
FLAGS = ["--draft-type", "model", "--num-draft-tokens", "4", "--no-gate"]  # gate: host noise
MAX_TOKENS = 24
# noise measured to give partial acceptance on these directories (mamba2 needs more)
NOISE = {"qwen3_next": 0.01, "lfm2": 0.01, "mamba2": 0.03}


def save_near_dir(arch: str, path, noise: float):
    """The seed-0 model directory with seeded noise added to every weight."""
    path = save_dir(arch, path)
    weights, key = mx.load(str(path / "model.safetensors")), mx.random.key(5)
    for name in sorted(weights):
        key, sub = mx.random.split(key)
        weights[name] = weights[name] + noise * mx.random.normal(weights[name].shape, key=sub)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    return path


def cli(target, draft, prompt: str) -> dict:
    """``specdec generate`` on the chat prompt (the template applied, as the server does)."""
    r = subprocess.run([sys.executable, "-m", "specdec", "generate", "--model", str(target),
                        "--draft-model", str(draft), *FLAGS, "--prompt", prompt,
                        "--max-tokens", str(MAX_TOKENS), "--compare", "--json"],
                       capture_output=True, text=True, env=preload_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["parity"] is True, out
    return out


@pytest.mark.slow
@pytest.mark.parametrize("arch,distinct", [("qwen3_next", 4), ("lfm2", 2), ("mamba2", 2)])
def test_serve_with_a_hybrid_draft_answers_as_the_cli(arch, distinct, tmp_path):
    """16 concurrent chats (``distinct`` prompts, repeated: each CLI reference costs a
    process start, ~3 s; 16 distinct took 2 min) equal the CLI's text and token count."""
    target = save_dir(arch, tmp_path / "target")
    draft = save_near_dir(arch, tmp_path / "draft", NOISE[arch])
    jobs = (PROMPTS[:distinct] * 16)[:16]
    with ThreadPoolExecutor(2) as refs_pool:  # the references run while the server starts
        refs = {p: refs_pool.submit(cli, target, draft, p) for p in PROMPTS[:distinct]}
        server = Server("--model", str(target), "--draft-model", str(draft), *FLAGS)
        try:
            want = {p: f.result() for p, f in refs.items()}
            got = _chats(server, jobs)
            assert server.health()["status"] == "ok"
        finally:
            server.stop()
    # answers to compare, mostly distinct (a random model answers two prompts alike at times)
    assert all(want[p]["tokens"] for p in want) and len({want[p]["text"] for p in want}) >= distinct // 2
    assert [g["choices"][0]["message"]["content"] for g in got] == [want[p]["text"] for p in jobs]
    assert [g["usage"]["completion_tokens"] for g in got] == [len(want[p]["tokens"]) for p in jobs]
    drafted = sum(g["usage"]["drafted_tokens"] for g in got)
    accepted = sum(g["usage"]["accepted_tokens"] for g in got)
    print(f"{arch}: {distinct} distinct prompts, accepted {accepted}/{drafted}")
    assert 0 < accepted < drafted, (accepted, drafted)  # accepted in part: roll-backs ran


def _chats(server: Server, prompts: list[str]) -> list[dict]:
    """The prompts as concurrent greedy chat completions."""
    with server.http() as http:
        model = http.get("/v1/models").json()["data"][0]["id"]

        def chat(p):
            r = http.post("/v1/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": p}],
                "max_tokens": MAX_TOKENS, "temperature": 0})
            assert r.status_code == 200, r.text
            return r.json()

        with ThreadPoolExecutor(len(prompts)) as pool:
            return list(pool.map(chat, prompts))
