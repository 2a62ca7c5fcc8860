"""``specdec.bench.peer_process``: a child killed by a signal is that peer's failure, named
with its signal and what to do (a real child: tests/crashing_peer.py); death messages and
the child's environment."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from specdec.bench.peer_process import PeerCrashed, PeerProcess, death_message, worker_env

CRASHING = str(Path(__file__).resolve().parents[1] / "crashing_peer.py")


@pytest.mark.parametrize("how, signame", [("SIGILL", "SIGILL (illegal instruction)"),
                                          ("abort", "SIGABRT (aborted)"),
                                          ("SIGSEGV", "SIGSEGV (segmentation fault)")])
def test_a_peer_killed_by_a_signal_is_that_peers_failure(how, signame):
    p = PeerProcess("llama.cpp", CRASHING, "Crashing", ["unused.gguf", how], hint="rebuild it")
    with pytest.raises(PeerCrashed, match="^" + re.escape(f"llama.cpp crashed: {signame} — rebuild it") + "$"):
        p.call("baseline", prompt_ids=[1, 2], max_tokens=4)
    # dead stays dead, saying so, and is not started again
    with pytest.raises(PeerCrashed, match="earlier; not run again"):
        p.call("speculative", prompt_ids=[1, 2], max_tokens=4, k=2)
    p.close()


def test_death_messages_name_the_signal_or_the_exit_code():
    assert death_message("llama.cpp", -signal.SIGILL, "rebuild it") == \
        "llama.cpp crashed: SIGILL (illegal instruction) — rebuild it"
    assert death_message("hf", 3, "") == "hf exited with code 3"


def test_the_childs_environment_drops_openblas_and_calms_openmp(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/a/libopenblas.so.0 /b/libother.so")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = worker_env()
    assert env["LD_PRELOAD"] == "/b/libother.so" and env["OMP_WAIT_POLICY"] == "PASSIVE"
