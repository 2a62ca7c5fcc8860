"""`specdec serve` honours the engine and memory flags it shares with `specdec generate`:
a quantized KV cache (``--kv-bits``) and the ngram-mod table's shape; and its prefix
cache lets a conversation's next turn skip the prefill of what it already saw, without
changing a token."""

from __future__ import annotations

import httpx
import openai
import pytest
from conftest import cache_auto_costs, linked_cache, plain_prefix, plain_reference
from serverproc import MODEL, Server

from specdec.prompts import parity_prompts

pytestmark = pytest.mark.slow

PROMPT = parity_prompts()["code_fnmatch_rename"]
N_TOKENS = 48
# the 4-bit cache's greedy answer leaves the full cache's at token 12 (measured): 16 tokens
# hold the difference, cut from the 48-token reference the auto-trees test decodes anyway
KV_TOKENS = 16


@pytest.fixture(scope="module")
def server():
    # a quantized KV cache decodes plainly (speculation on it is refused: not lossless)
    s = Server("--draft-type", "none", "--kv-bits", "4")
    yield s
    s.stop()


def test_kv_bits_reach_the_engine_and_a_request_cannot_speculate_on_them(server, smollm):
    import specdec

    messages = [{"role": "user", "content": PROMPT}]
    ref4 = specdec.generate(*smollm, messages, drafter=None, max_tokens=KV_TOKENS, kv_bits=4)
    full = plain_prefix(MODEL, messages, KV_TOKENS, of=N_TOKENS)
    # the test can only tell the cache apart where the 4-bit cache changes the output
    assert ref4.tokens != full
    client = server.openai()
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=KV_TOKENS, temperature=0)
    assert r.choices[0].message.content == ref4.text
    with pytest.raises(openai.BadRequestError, match="not lossless under speculation.*draft_type 'none'"):
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                       extra_body={"speculative": {"draft_type": "suffix"}})


def test_a_conversations_next_turn_reuses_the_prefix_cache(smollm):
    import specdec

    s = Server("--draft-type", "suffix")
    try:
        client = s.openai()
        messages = [{"role": "user", "content": PROMPT}]
        first = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24)
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "Now also rename fnmatch to match."}]
        second = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24)
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached >= first.usage.prompt_tokens - 1  # all of turn 1's prompt at least
        fresh = specdec.generate(*smollm, messages, drafter="suffix", max_tokens=24)
        assert second.choices[0].message.content == fresh.text
        metrics = httpx.get(s.base + "/metrics", timeout=10).text
        assert f"specdec_cached_prompt_tokens_total {float(cached)}" in metrics
        assert "specdec_prefix_cache_entries 1.0" in metrics  # turn 2 covers turn 1's entry
    finally:
        s.stop()


def test_auto_trees_and_adaptive_k_are_plain_decoding_with_the_prefix_cache_off(smollm, tmp_path):
    """A request may ask for an automatic tree budget or adaptive k (``speculative``): the
    server measures the drafter's own cost (and the verify curve) once, into its cost
    cache, and the text is plain decoding's. The cache holds a flat verify curve, as
    Metal/CUDA measure it, so the shaper does branch. The server runs with the prefix cache
    off (``--prompt-cache-bytes 0``): the second request repeats the first one's prompt and
    still reads none of it from a cache (one server for both: a start is seconds here)."""
    cost_dir = tmp_path / "cost"
    cache_auto_costs(smollm[0], lambda L: 0.05, tmp_path)
    priced = {p.name: p.read_text() for p in cost_dir.iterdir()}
    messages = [{"role": "user", "content": PROMPT}]
    plain = plain_reference(MODEL, messages, N_TOKENS)  # the kv-bits test cuts its 16 from it
    linked_cache(tmp_path)  # the converted model is linked: only the costs start empty
    s = Server("--draft-type", "suffix", "--max-batch", "1", "--prompt-cache-bytes", "0",
               "--ngram-mod-size", "4096", "--ngram-mod-n", "3", env={"SPECDEC_CACHE_DIR": str(tmp_path)})
    try:
        # the table-shape flags reach the shared memory (requests may draft with ngram-mod)
        memory = httpx.get(s.base + "/health", timeout=10).json()["memory"]
        assert (memory["table_size"], memory["table_n"]) == (4096, 3)
        for extra in ({"draft_tree_budget": "auto"}, {"adaptive_k": True}):
            r = s.openai().chat.completions.create(
                model=MODEL, messages=messages, max_tokens=N_TOKENS, temperature=0,
                extra_body={"speculative": extra})
            assert r.choices[0].message.content == plain.text, extra
            assert r.usage.model_extra["drafted_tokens"] > 0, extra
            assert r.usage.prompt_tokens_details.cached_tokens == 0, extra  # no prefix cache
    finally:
        s.stop()
    # the suffix drafter's cost was measured once for the first request and kept
    assert [p.name for p in cost_dir.glob("draft-suffix-*.json")]
    assert {n: (cost_dir / n).read_text() for n in priced} == priced  # read, not re-measured
