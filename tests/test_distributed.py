"""Speculative decoding on a target sharded over an mlx.distributed group.

The group runs on this machine: 2 processes on 127.0.0.1 with the ring backend, started
by the test (directly with MLX_RANK/MLX_HOSTFILE, as mlx.launch does, or by mlx.launch
itself) and always killed by it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import tiny_model
from serverproc import free_port
from specdec.backend import preload_env
from specdec.distributed import DistributedError, LeaderModel, Watchdog, init_group, shard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RANKS = os.path.join(HERE, "distributed_ranks.py")


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    # one BLAS thread per rank: two ranks share this machine's cores
    return preload_env({**os.environ, "PYTHONPATH": path, "OPENBLAS_NUM_THREADS": "1", **extra})


class Output:
    """A pipe read on a thread into a string (so a test can wait for a line)."""

    def __init__(self, pipe):
        self.text = ""
        self._t = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._t.start()

    def _read(self, pipe) -> None:
        for line in iter(pipe.readline, ""):
            self.text += line

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.text and time.monotonic() < deadline:
            time.sleep(0.1)
        return needle in self.text


class Group:
    """``n`` ranks of ``argv`` on loopback ports, started the way mlx.launch starts them."""

    def __init__(self, argv: list[str], n: int = 2):
        ports = [free_port() for _ in range(n)]
        self.hostfile = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115
        json.dump([[f"127.0.0.1:{p}"] for p in ports], self.hostfile)
        self.hostfile.close()
        self.procs, self.out, self.err = [], [], []
        for rank in range(n):
            p = subprocess.Popen(argv, env=_env(MLX_RANK=str(rank), MLX_HOSTFILE=self.hostfile.name),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            self.procs.append(p)
            self.out.append(Output(p.stdout))
            self.err.append(Output(p.stderr))

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()  # SIGKILL also ends a stopped process
            p.wait()
        os.unlink(self.hostfile.name)


def _parity(result: dict) -> None:
    plain = result["plain"]["tokens"]
    assert plain
    for name in ("ngram", "suffix"):
        r = result[name]
        assert r["tokens"] == plain, name
        # the comparison means something: drafts were accepted and some were rejected
        assert 0 < r["accepted"] < r["drafted"], (name, r)


def _result(text: str) -> dict:
    line = next(ln for ln in text.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


# ---- in one process ------------------------------------------------------------------


def test_a_class_without_shard_or_pipeline_is_refused():
    model = tiny_model("gemma3")  # mlx-lm's gemma3_text has neither
    with pytest.raises(DistributedError, match="neither shard\\(\\) nor pipeline\\(\\)"):
        shard(model, init_group())


def test_leader_on_a_group_of_one_decodes_as_the_bare_model():
    """The wrapper's message round trip (inline part, overflow message for prefill chunks
    and long drafts, cache position) gives the model exactly the caller's tokens."""
    from specdec.drafters import NgramDrafter
    from specdec.engine import token_stream

    model = tiny_model("qwen2", seed=3)
    leader = LeaderModel(model, init_group())
    prompt = [5, 9, 13, 2, 7] * 5  # 25 tokens: more than the inline part

    def run(m, drafter):
        return [e.token for e in token_stream(m, prompt, drafter=drafter, max_tokens=30,
                                              num_draft_tokens=20, prefill_step_size=24)]

    for make in (lambda: None, lambda: NgramDrafter(1, 3)):
        assert run(leader, make()) == run(model, make())
    assert leader.forwards > 0
    # a token tree would run rank 0's mask and positions only: refused, never inexact
    with pytest.raises(ValueError, match="--draft-tree-budget 0"):
        next(token_stream(leader, prompt, drafter=NgramDrafter(1, 3), tree_budget=8))


def test_watchdog_fires_only_when_beats_stop():
    fired = threading.Event()
    dog = Watchdog(0.4, lambda s: fired.set())
    for _ in range(12):  # 1.2 s of steady progress
        dog.beat()
        time.sleep(0.1)
    dog.disarm()
    time.sleep(0.8)  # idle (between requests): no deadline
    assert not fired.is_set()
    dog.beat()  # a request that makes no progress
    assert fired.wait(10)


def test_prompt_cache_file_is_refused_with_distributed(capsys):
    from specdec.cli import main

    assert main(["generate", "--distributed", "--prompt-cache-file", "x.safetensors"]) == 2
    assert "--prompt-cache-file does not work with --distributed" in capsys.readouterr().err
    for command in ("generate", "serve"):
        assert main([command, "--distributed", "--draft-tree-budget", "8"]) == 2
        assert "--draft-tree-budget does not work with --distributed" in capsys.readouterr().err


# ---- real groups -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sig, message", [(signal.SIGKILL, "lost a rank"),
                                          (signal.SIGSTOP, "stopped answering")])
def test_tiny_group_is_exact_and_a_dead_or_hung_rank_ends_rank0(sig, message):
    """Sharded tiny qwen2: speculative == plain for ngram and suffix; then rank 1 is
    killed (its sockets close) or stopped (it hangs) mid-request, and rank 0 says so and
    exits with status 3 instead of hanging."""
    group = Group([sys.executable, RANKS, "tiny", "3"])
    try:
        assert group.out[0].wait_for("PROGRESS", 120), group.err[0].text + group.err[1].text
        _parity(_result(group.out[0].text))
        assert group.out[1].text == ""  # followers print nothing
        os.kill(group.procs[1].pid, sig)
        assert group.procs[0].wait(60) == 3
        assert group.err[0].wait_for(message, 5), group.err[0].text
    finally:
        group.kill()


@pytest.mark.slow
def test_a_model_dir_sharded_over_mlx_launch_speculates_exactly(tmp_path):
    """mlx.launch -n 2 --backend ring: a qwen2 directory (4 heads, 2 KV heads; tiny random
    weights, byte tokenizer) loaded by name on each rank and split in two; speculative
    output == plain output of the same sharded model, per drafter, with accepted and
    rejected drafts of each. Qwen2.5-Coder-0.5B here cost 150 CPU s (two fp32 loads, two
    ranks' forwards) for the same plumbing."""
    from hybrid_tiny import save_dir

    # weights at 0.5 (not the loops of 0.15, where a follower left one stale position after a
    # rollback still decoded plain's tokens); seed 2: 24 tokens hold accepted and rejected
    # drafts of each drafter
    model = save_dir("qwen2", tmp_path / "qwen2", seed=2, scale=0.5)
    argv = ["mlx.launch", "-n", "2", "--backend", "ring", "--starting-port", str(free_port()),
            "--", sys.executable, RANKS, "parity", str(model), "24"]
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=400)
        # mlx.launch exits 0 even when a rank fails: the result line is the evidence
        assert proc.returncode == 0 and "RESULT " in out, err[-4000:]
        _parity(_result(out))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of processes this test started
            proc.wait()


def _tiny_dir(tmp_path) -> str:
    """A tiny qwen2 directory (``hybrid_tiny.save_dir``): the CLI's and the bench's plumbing
    under --distributed does not hang on the weights (sharded exactness is the mlx.launch
    test's and the tiny group's), and SmolLM2's load and forwards were most of each test's time."""
    from hybrid_tiny import save_dir

    return str(save_dir("qwen2", tmp_path / "qwen2"))


@pytest.mark.slow
def test_generate_distributed_cli_on_a_group_of_one(tmp_path):
    """The CLI path (load, shard, lead, stop) end to end; a group of one runs anywhere."""
    proc = subprocess.run(
        [sys.executable, "-m", "specdec", "generate", "--distributed", "--model", _tiny_dir(tmp_path),
         "--dtype", "float32", "--compare", "--json", "--max-tokens", "12", "--raw", "--prompt",
         "a b c a b c a b c a b c"], env=_env(SPECDEC_CACHE_DIR=str(tmp_path / "cache")),
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["parity"] is True and out["verify_steps"] > 0


@pytest.mark.slow
def test_serve_distributed_answers_then_a_dead_rank_gives_503_and_stops(tmp_path):
    """rank 0 serves the openai API on a sharded model; rank 1 follows. After rank 1 is
    killed, the next request gets a 503 naming the lost group (not a hang, not a 500),
    and rank 0 logs it and stops. The model is a tiny qwen2 directory: what this shows
    does not hang on the weights (sharded exactness is the mlx.launch test's and the tiny
    group's), and loading the real Qwen on both ranks took half of this test's minute."""
    import openai

    from hybrid_tiny import save_dir
    from serverproc import Server

    model = str(save_dir("qwen2", tmp_path / "qwen2"))

    # a short watchdog: a collective that hangs on the dead peer ends in a 503 only when it
    # fires, so the test waits it out once (60 s took 60 % of the test, 10 s a quarter; a step
    # of the tiny model is milliseconds, a five-hundredth of the timeout on a loaded 2-core machine)
    flags = ["--distributed", "--distributed-timeout", "5", "--model", model, "--dtype", "float32"]
    ports = [free_port(), free_port()]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([[f"127.0.0.1:{p}"] for p in ports], f)
    ring = {"MLX_HOSTFILE": f.name, "OPENBLAS_NUM_THREADS": "1"}
    follower = subprocess.Popen([sys.executable, "-m", "specdec", "serve", "--port", "1", *flags],
                                env=_env(MLX_RANK="1", **ring), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    server = None
    try:
        server = Server(*flags, env={"MLX_RANK": "0", "PYTHONPATH": ROOT, **ring})
        client = server.openai(timeout=300)  # > the watchdog: a hang still ends in a 503
        messages = [{"role": "user", "content": "Repeat: one two three one two three"}]
        name = client.models.list().data[0].id
        r = client.chat.completions.create(model=name, messages=messages, max_tokens=8,
                                           temperature=0)
        assert r.choices[0].message.content and r.usage.completion_tokens > 0
        follower.kill()
        follower.wait()
        with pytest.raises(openai.APIStatusError) as err:
            client.chat.completions.create(model=name, messages=messages, max_tokens=8,
                                           temperature=0)
        assert err.value.status_code == 503 and "lost a rank" in str(err.value)
        assert server.proc.wait(60) != 0  # it stopped (by its own SIGTERM, via uvicorn)
        assert "the distributed group lost a rank" in server.log()
    except Exception:
        if server is not None:
            print(server.log()[-4000:])  # shown by pytest on failure
        raise
    finally:
        if server is not None:
            server.kill9()
        if follower.poll() is None:
            follower.kill()
        follower.wait()
        os.unlink(f.name)


def test_bench_distributed_refuses_what_a_sharded_target_cannot_run(capsys):
    """Peers and token trees are refused at start-up, before any model loads."""
    from specdec.cli import main

    assert main(["bench", "--distributed", "--profile", "distributed", "--peers", "llama.cpp"]) == 2
    assert "do not run sharded: pass --peers none" in capsys.readouterr().err
    assert main(["bench", "--distributed"]) == 2  # the default profile has tree configs
    err = capsys.readouterr().err
    assert "suffix:k=4:tree=auto" in err and "--draft-tree-budget does not work with --distributed" in err


@pytest.mark.slow
def test_bench_distributed_measures_on_the_leader(tmp_path):
    """``specdec bench --distributed`` end to end on a group of one: it runs on the
    leader (the report says sharded), holds parity and records the cost curve (on a tiny
    directory, ``_tiny_dir``; without the warm-up repetition, which measured nothing more)."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "specdec", "bench", "--distributed", "--quick", "--model",
         _tiny_dir(tmp_path), "--dtype", "float32", "--workloads", "code_hints", "--config", "ngram:k=2",
         "--max-tokens", "8", "--no-plots", "--no-oracle", "--no-warmup", "--out", str(out)],
        env=_env(SPECDEC_CACHE_DIR=str(tmp_path / "cache")), capture_output=True, text=True,
        timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["plan"]["distributed"] == 1 and res["plan"]["peers"] == []
    # 1 .. the largest k + 1 (peer_k 4 outranks the config's 2); no tree config, no longer blocks
    assert sorted(map(int, res["cost_curve"])) == [1, 2, 3, 4, 5]
    assert "sharded over 1 ranks" in (out / "report.md").read_text()
    assert "parity: 0 mismatches of ours" in proc.stdout
