"""The real agent CLIs against ``specdec serve`` on loopback (Qwen2.5-Coder-0.5B): Claude
Code (``claude -p``, the Anthropic Messages API) and Codex (``codex exec``, the Responses
API), each unchanged but for a short system prompt and one tool, so their prompts prefill in
seconds on a small CPU (their full ones are 10-20k tokens). ``make install-agents`` installs
both from npm; without them these tests skip, saying how to install them. Both run on the
package's shared Qwen server (tests/server/conftest.py; a server of their own cost a 2.4 GB load)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import requires_model

from .codex import codex_home

QWEN = "qwen2.5-coder-0.5b"
SYSTEM = "You are a coding assistant in a terminal. Answer briefly."

pytestmark = [pytest.mark.slow, requires_model(QWEN)]


@pytest.fixture(scope="module")
def server(qwen):  # the package's shared Qwen server (tests/server/conftest.py): its claude-* alias
    return qwen


def claude(server, cwd, home, *args: str) -> dict:
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.base, "ANTHROPIC_API_KEY": server.api_key,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "HOME": str(home),
           # a slow CPU's prefill may outlast Claude Code's idle-stream watchdog
           "CLAUDE_STREAM_IDLE_TIMEOUT_MS": "1800000"}
    r = subprocess.run(["claude", "-p", "--system-prompt", SYSTEM, "--tools", "Read",
                        "--output-format", "json", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=1500, check=False)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:], server.log()[-3000:])
    return json.loads(r.stdout)


@pytest.mark.skipif(shutil.which("claude") is None,
                    reason="needs the Claude Code CLI: make install-agents")
def test_claude_code_runs_and_its_second_turn_reads_the_prefix_cache(server, tmp_path):
    """Two ``claude -p`` turns of one conversation (``-c``): both exit 0 with an answer, and
    the second reads at least 90 % of its prompt from the prefix cache (Claude Code's
    per-run billing line would otherwise change the prompt from its first tokens)."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "notes.txt").write_text("The release is on Friday.\n")
    logged = len(server.log())  # the shared server's log: this test's requests follow
    first = claude(server, work, home, "Reply with the single word: hello")
    assert first["result"].strip()
    second = claude(server, work, home, "-c", "Now reply with the single word: bye")
    assert second["result"].strip()
    usage = second["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    print(f"claude -p turn 2 usage: {usage}")
    assert usage["cache_read_input_tokens"] >= 0.9 * prompt, usage
    assert "POST /v1/messages" in server.log()[logged:]


@pytest.mark.skipif(shutil.which("codex") is None,
                    reason="needs the Codex CLI: make install-agents")
def test_codex_exec_runs_against_the_server(server, tmp_path):
    """``codex exec`` with a local provider (``wire_api = "responses"``), its own
    instructions shortened and its optional features off (its default prompt is ~10k
    tokens): exit 0 with an answer."""
    env = codex_home(tmp_path / "codex-home", base=server.base, model=QWEN, system=SYSTEM, key=server.api_key)
    logged = len(server.log())  # the shared server's log: this test's requests follow
    r = subprocess.run(["codex", "exec", "--skip-git-repo-check", "Say hello in one word."],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip(), r.stderr[-3000:]
    assert "POST /v1/responses" in server.log()[logged:]
