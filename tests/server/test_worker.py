"""A hybrid model (tiny random-weight qwen3_next directory, ``hybrid_tiny.save_dir``) through
the real ``specdec generate --compare`` (drafting every step) and ``specdec serve`` with default
flags (issue #25): parity with accepted drafts, concurrent requests answered exactly as plain decoding
answers them, a conversation's second turn served from the prefix cache, and /health
saying that hybrid requests run one at a time."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from hybrid_tiny import save_dir
from serverproc import Server

from specdec.backend import preload_env

PROMPTS = ["abc abc abc abc", "one two one two one", "xyz xyz xy", "hello hello hello"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_dir("qwen3_next", tmp_path_factory.mktemp("hybrid") / "qwen3_next")


def specdec_cli(capsys, process: bool, *argv: str) -> tuple[int, str, str]:
    """``specdec ARGV``: (exit status, stdout, stderr). ``process``: the real ``python -m
    specdec``; else ``cli.main`` (which it exits with) in this process, without the process's
    ~3.5 CPU s of imports. One case of each test below runs the real process."""
    if process:
        r = subprocess.run([sys.executable, "-m", "specdec", *argv], capture_output=True, text=True,
                           env=preload_env(), timeout=300)
        return r.returncode, r.stdout, r.stderr
    from specdec.cli import main

    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("arch,draft_type,process", [
    ("qwen3_next", "ngram", True), ("qwen3_next", "suffix", False), ("lfm2", "suffix", False),
    ("mamba2", "ngram", False)])
def test_generate_compare_reports_parity(model_dir, tmp_path, capsys, arch, draft_type, process):
    path = model_dir if arch == "qwen3_next" else save_dir(arch, tmp_path / arch)
    code, out, err = specdec_cli(
        capsys, process, "generate", "--model", str(path), "--prompt", "abc abc abc abc abc abc",
        "--max-tokens", "32", "--compare",
        # the gate off: its timed choices on a tiny model are host noise, and the test is
        # that drafts are accepted and rolled back exactly
        "--json", "--draft-type", draft_type, "--no-gate")
    assert code == 0, err
    result = json.loads(out)
    assert result["parity"] is True and result["acceptance_rate"] > 0, result


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server("--model", str(model_dir))  # default flags: grammar,suffix drafts, prefix cache
    yield s
    s.stop()


def _chat(http, model, messages, **kw):
    r = http.post("/v1/chat/completions", json={"model": model, "messages": messages,
                                                "max_tokens": 24, "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.slow  # a server subprocess (~10 s with its start)
def test_serve_defaults_concurrent_and_multi_turn(server):
    health = server.health()
    assert health["status"] == "ok" and health["max_batch"] == 1
    assert "recurrent" in health["one_at_a_time"]
    with server.http() as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        plain = {p: _chat(http, model, [{"role": "user", "content": p}],
                          speculative={"draft_type": "none"})["choices"][0]["message"]["content"]
                 for p in PROMPTS}
        jobs = [PROMPTS[i % len(PROMPTS)] for i in range(32)]
        # every other request with the gate off: those draft at every step, so drafts are
        # verified and rolled back whatever the gate's timed choices make of the others
        ungated = [{"speculative": {"gate": False}} if i % 2 else {} for i in range(32)]
        with ThreadPoolExecutor(32) as pool:
            got = list(pool.map(lambda p, kw: _chat(http, model, [{"role": "user", "content": p}], **kw),
                                jobs, ungated))
        assert [g["choices"][0]["message"]["content"] for g in got] == [plain[p] for p in jobs]
        assert sum(g["usage"]["drafted_tokens"] for g in got[1::2]) > 0
        first = got[0]["choices"][0]["message"]["content"]
        turn2 = [{"role": "user", "content": jobs[0]}, {"role": "assistant", "content": first},
                 {"role": "user", "content": "again"}]
        second = _chat(http, model, turn2)
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert server.health()["status"] == "ok"


@pytest.mark.slow  # shares the slow test's server; alone it would start one (~10 s) in test-fast
def test_a_tree_request_on_a_hybrid_is_a_400(server):
    """Issue #35: a request's own tree budget is refused with the one message (it failed
    when its job started), and the server goes on answering."""
    with server.http() as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        r = http.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "abc"}], "max_tokens": 4,
            "speculative": {"draft_tree_budget": "auto"}})
        assert r.status_code == 400, r.text
        assert "recurrent layers (hybrids): send speculative.draft_tree_budget 0" in r.text
        _chat(http, model, [{"role": "user", "content": "abc"}])


def test_a_model_that_cannot_roll_back_serves_plain(caplog):
    """A cache kind that cannot roll back at all (attention sinks here) turns speculation
    off for the whole server with one warning, instead of failing every request."""
    from mlx_lm.models.cache import RotatingKVCache

    from specdec.drafters.base import NoDrafter
    from specdec.server.config import ServerConfig
    from specdec.server.engine.worker import InferenceWorker

    class Sinks:
        def make_cache(self):
            return [RotatingKVCache(max_size=8, keep=4)]

    w = InferenceWorker(ServerConfig(), metrics=None)
    w.model = Sinks()
    with caplog.at_level("WARNING", logger="specdec.server"):
        w.plain_only = w.cannot_speculate()
    assert "keep=4" in w.plain_only and "serving plain decoding" in caplog.text
    assert isinstance(w.drafter_for(None), NoDrafter)


@pytest.mark.parametrize("argv,process", [
    (["serve", "--draft-tree-budget", "4", "--port", "1"], True),
    (["generate", "--draft-tree-budget", "4", "--prompt", "abc"], False),
    (["generate", "--draft-tree-budget", "auto", "--prompt", "abc"], False)])
def test_tree_flags_on_a_hybrid_are_refused_at_start(model_dir, capsys, argv, process):
    """Issue #35: token trees on a hybrid target stop with the one message saying what to do
    (``auto`` crashed measuring a tree step; ``serve`` started and failed every request; it
    is refused before it listens: port 1 is never bound). In process, an exception
    escaping ``main`` fails the test as the process's traceback would."""
    code, _, err = specdec_cli(capsys, process, argv[0], "--model", str(model_dir), *argv[1:])
    assert code != 0 and "Traceback" not in err, err
    assert "recurrent layers (hybrids): use linear drafts (--draft-tree-budget 0)" in err
