"""A real ``specdec serve`` process on a free loopback port, for the server tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

from specdec.backend import preload_env

MODEL = "smollm2-135m"
# plain decoding of an endless count: ~12 tok/s here, so 4000 tokens would take minutes
LONG = {"model": MODEL, "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 4000, "stream": True,
        "speculative": {"draft_type": "none"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags: str, env: dict[str, str] | None = None, api_key: str | None = None,
                 start_timeout: float = 180):
        self.port = free_port()
        self.api_key = api_key
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (lives as long as the server)
            "w+", prefix="specdec-serve-", suffix=".log", delete=False)
        args = [sys.executable, "-m", "specdec", "serve", "--port", str(self.port), *flags]
        if "--drain-timeout" not in flags:  # a test's stop() need not wait out long streams
            args += ["--drain-timeout", "3"]
        if api_key:
            args += ["--api-key", api_key]
        self.proc = subprocess.Popen(args, env=preload_env({**os.environ, **(env or {})}),
                                     stdout=self.log_file, stderr=subprocess.STDOUT)
        self._wait_healthy(start_timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"server not healthy after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        with open(self.log_file.name) as f:
            return f.read()

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def http(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers=self.headers(), timeout=kw.pop("timeout", 300), **kw)

    def openai(self, **kw):
        from openai import OpenAI

        return OpenAI(base_url=self.base + "/v1", api_key=self.api_key or "unused", max_retries=0,
                      timeout=kw.pop("timeout", 300), **kw)

    def health(self) -> dict:
        return httpx.get(self.base + "/health", timeout=10).json()

    def metric(self, name: str) -> float:
        """Sum of a metric's samples whose line starts with ``name`` (labels allowed)."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        text = httpx.get(self.base + "/metrics", headers=headers, timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and line[len(name)] in " {")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


def raw_request(port: int, body: dict) -> socket.socket:
    """A client we can disconnect at any moment: a bare socket with the request sent."""
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
              + b"Content-Type: application/json\r\n"
              + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def wait_for(predicate, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
