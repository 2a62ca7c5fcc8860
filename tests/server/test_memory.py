"""The shared speculative memory across server restarts: saved at shutdown, never torn by
a SIGKILL in the middle of a save, and a warm start accepts more drafts on a repeated
workload than a cold one."""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest
from serverproc import MODEL, Server

from specdec.drafters.ngram_mod import NgramModTable, tokenizer_fingerprint
from specdec.drafters.suffix import SuffixHistory
from specdec.server.engine.memory import PAUSE_ENV

pytestmark = pytest.mark.slow  # server processes on a real model

# open-ended prompts: little to copy from the prompt, so a cold start drafts poorly
WORKLOAD = [("Write a short story about a lighthouse keeper.", "ngram-mod"),
            ("What is 17 times 23? Explain step by step.", "suffix")]


def ask(server, prompt, draft_type, max_tokens=24):
    r = server.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
        extra_body={"speculative": {"draft_type": draft_type}})
    return r.choices[0].message.content, r.usage.model_extra


def files(path):
    return [pathlib.Path(p).read_bytes() for p in (path, path + ".suffix")]


def load_memory(path, tokenizer):
    fp = tokenizer_fingerprint(tokenizer)
    return (NgramModTable.load(path, tokenizer_fingerprint=fp),
            SuffixHistory.load(path + ".suffix", tokenizer_fingerprint=fp))


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """A first server runs the workload with an empty memory, then saves it at shutdown."""
    path = str(tmp_path_factory.mktemp("memory") / "memory.bin")
    s = Server("--memory-file", path, "--save-interval", "0")
    results = [ask(s, p, d) for p, d in WORKLOAD]
    assert not os.path.exists(path)  # --save-interval 0: nothing written before shutdown
    assert s.stop() == -signal.SIGTERM  # uvicorn re-raises the signal after shutdown
    return path, results


def test_saved_at_shutdown(cold, smollm):
    path, _ = cold
    table, history = load_memory(path, smollm[1])
    assert table.used > 0 and len(history.docs) == len(WORKLOAD)


def test_sigkill_during_a_save_leaves_the_old_memory(cold, smollm):
    path, _ = cold
    old = files(path)
    staging = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".staging")
    s = Server("--memory-file", path, "--save-interval", "1", env={PAUSE_ENV: "300"})
    ask(s, "Name three rivers.", "suffix", max_tokens=8)  # changes the memory
    deadline = time.monotonic() + 60
    while not os.path.exists(staging):  # the new table is written; the save now pauses
        assert time.monotonic() < deadline and s.proc.poll() is None, s.log()
        time.sleep(0.1)
    s.kill9()
    assert files(path) == old
    table, history = load_memory(path, smollm[1])  # valid, not torn
    assert len(history.docs) == len(WORKLOAD)

    restarted = Server("--memory-file", path)  # loads it, cleans the staging file up
    loaded = restarted.health()["memory"]["loaded"]
    assert loaded == {"table_slots": table.used, "history_tokens": history.tokens}
    assert not os.path.exists(staging)
    ask(restarted, "Name three rivers.", "suffix", max_tokens=8)
    assert restarted.stop() == -signal.SIGTERM
    table, history = load_memory(path, smollm[1])  # a completed save: the new memory
    assert len(history.docs) == len(WORKLOAD) + 1


def test_warm_start_accepts_more_on_a_repeated_workload(cold):
    path, cold_results = cold
    warm = Server("--memory-file", path)
    try:
        for (prompt, draft_type), (cold_text, cold_usage) in zip(WORKLOAD, cold_results):
            text, usage = ask(warm, prompt, draft_type)
            print(f"\n{draft_type}: cold acceptance {cold_usage['acceptance_rate']:.2f} "
                  f"(mean length {cold_usage['mean_acceptance_length']:.2f}), warm "
                  f"{usage['acceptance_rate']:.2f} ({usage['mean_acceptance_length']:.2f})")
            assert text == cold_text  # lossless either way
            assert usage["acceptance_rate"] > cold_usage["acceptance_rate"]
            assert usage["mean_acceptance_length"] > cold_usage["mean_acceptance_length"]
    finally:
        warm.stop()


def test_sigterm_mid_stream_ends_it_with_an_error_event_and_saves(tmp_path, smollm):
    """SIGTERM while a long stream runs: it runs on for --drain-timeout, then its client
    reads a 'shutting down' error event (not a cut connection); the memory is saved whole
    and the process exits."""
    import json

    import httpx
    from serverproc import LONG

    path = str(tmp_path / "memory.bin")
    s = Server("--memory-file", path, "--save-interval", "0", "--drain-timeout", "2")
    ask(s, "Say hello.", "suffix", max_tokens=4)  # something to save
    events, t0 = [], None
    with httpx.stream("POST", s.base + "/v1/completions", json=LONG, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
                if len(events) == 3:
                    s.proc.send_signal(signal.SIGTERM)
                    t0 = time.monotonic()
    assert "error" in events[-1] and "shutting down" in events[-1]["error"]["message"]
    assert 1.5 < time.monotonic() - t0 < 30  # it ran on for the drain, then was cut
    assert len(events) > 4 and all("choices" in e for e in events[:-1])
    assert s.proc.wait(60) == -signal.SIGTERM
    table, history = load_memory(path, smollm[1])
    assert len(history.docs) >= 1
