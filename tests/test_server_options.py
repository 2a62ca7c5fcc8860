"""`specdec serve` honours the engine and memory flags it shares with `specdec generate`:
a quantized KV cache (``--kv-bits``) and the ngram-mod table's shape."""

from __future__ import annotations

import httpx
import pytest
from serverproc import MODEL, Server

from specdec.prompts import parity_prompts

pytestmark = pytest.mark.slow

PROMPT = parity_prompts()["code_fnmatch_rename"]
N_TOKENS = 48


@pytest.fixture(scope="module")
def server():
    s = Server("--draft-type", "ngram-mod", "--kv-bits", "4", "--ngram-mod-size", "4096",
               "--ngram-mod-n", "3")
    yield s
    s.stop()


def test_table_shape_flags_reach_the_shared_memory(server):
    memory = httpx.get(server.base + "/health", timeout=10).json()["memory"]
    assert (memory["table_size"], memory["table_n"]) == (4096, 3)


def test_kv_bits_reach_the_engine(server, smollm):
    import specdec

    messages = [{"role": "user", "content": PROMPT}]
    ref4 = specdec.generate(*smollm, messages, drafter=None, max_tokens=N_TOKENS, kv_bits=4)
    full = specdec.generate(*smollm, messages, drafter=None, max_tokens=N_TOKENS)
    # the test can only tell the cache apart where the 4-bit cache changes the output
    assert ref4.tokens != full.tokens
    r = server.openai().chat.completions.create(model=MODEL, messages=messages,
                                                max_tokens=N_TOKENS, temperature=0)
    assert r.choices[0].message.content == ref4.text
    assert r.usage.model_extra["drafted_tokens"] > 0  # speculation ran on the quantized cache
