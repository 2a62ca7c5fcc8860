"""A native peer in a child process: its crash is that peer's failure, never ours.

Contract: ``PeerProcess(name, file, cls, args, hint)`` starts a Python child that builds
``cls(*args)`` from the module at ``file`` (``native_peers.serve``) and forwards
``call(method, **kwargs)`` to it over a JSON-lines pipe. A child killed by a signal (a
native library's illegal instruction, an abort) raises ``PeerCrashed`` naming the signal
and ``hint`` (what to do); an exception inside the child raises ``RuntimeError`` with its
text; a load failure raises ``PeerUnavailable``. Native code never runs in the caller's
process. Tests: tests/bench/test_peer_process.py, tests/bench/test_peers.py (a real child sent
SIGILL and ``os.abort()``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

NATIVE_PEERS_FILE = str(Path(__file__).with_name("native_peers.py"))
# Loads native_peers by file path (package __init__s may import mlx) and serves.
_BOOT = ("import importlib.util as u, json, sys; s = u.spec_from_file_location('_native_peers', "
         "sys.argv[1]); m = u.module_from_spec(s); sys.modules[s.name] = m; "
         "s.loader.exec_module(m); m.serve(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))")


class PeerUnavailable(Exception):
    """A peer (or one of its modes) cannot run here; the message says what to install."""


class PeerCrashed(PeerUnavailable):
    """The peer's process died (a signal or an exit); the message names it and what to do."""


def death_message(name: str, returncode: int, hint: str) -> str:
    """``llama.cpp crashed: SIGILL (illegal instruction) — <hint>`` for a child's end."""
    if returncode < 0:
        sig = signal.Signals(-returncode)
        what = f"crashed: {sig.name} ({(signal.strsignal(sig) or sig.name).lower()})"
    else:
        what = f"exited with code {returncode}"
    return f"{name} {what}" + (f" — {hint}" if hint else "")


def worker_env() -> dict[str, str]:
    """The child's environment. The OpenBLAS that mlx needs preloaded interposes on torch's
    BLAS calls (HF prefill ~10x slower with it here), and torch's OpenMP threads spin-wait
    by default (decoding 4-5x slower on shared cores): drop the one, calm the other."""
    env = dict(os.environ)
    kept = [p for p in env.get("LD_PRELOAD", "").split() if "openblas" not in p]
    env["LD_PRELOAD"] = " ".join(kept)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


class PeerProcess:
    """One peer's child process; ``call`` runs a method there and returns its result."""

    def __init__(self, name: str, file: str, cls: str, args: list[Any], hint: str = ""):
        self.name, self.hint, self.dead = name, hint, ""
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, NATIVE_PEERS_FILE, file, cls, json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=worker_env())
        if self._proc.stdin is None or self._proc.stdout is None:  # PIPE gives both: never
            raise RuntimeError(f"{name}: the peer process has no pipes")
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        try:
            self.load_s = float(self._reply()["load_s"])
        except PeerCrashed:
            raise
        except RuntimeError as e:
            self.close()
            raise PeerUnavailable(f"{name} cannot load: {e}") from None

    def _reply(self) -> Any:
        line = self._stdout.readline()
        if not line:
            self.dead = death_message(self.name, self._proc.wait(), self.hint)
            raise PeerCrashed(self.dead)
        msg = json.loads(line)
        if "error" in msg:
            raise RuntimeError(f"{self.name}: {msg['error']}")
        return msg["result"]

    def call(self, method: str, **kwargs: Any) -> Any:
        if self.dead:
            raise PeerCrashed(f"{self.dead} (earlier; not run again)")
        try:
            self._stdin.write(json.dumps({"method": method, "kwargs": kwargs}) + "\n")
            self._stdin.flush()
        except BrokenPipeError:
            pass  # it died before reading: _reply says how
        return self._reply()

    def close(self) -> None:
        """Stop the child (it also stops by itself when this process exits)."""
        if self._proc.poll() is None:
            try:
                self._stdin.close()
            except BrokenPipeError:
                pass
            self._proc.wait()
