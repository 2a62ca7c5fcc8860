"""Prompt caches: a conversation that reuses one cache turn after turn emits exactly what
fresh calls emit, with every drafter, past a sliding window too; the cache holds exactly
the prompt and the emitted tokens after each call; files round-trip and refuse misuse."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from conftest import cached_tiny, plain_reference, real_model, requires_model

from specdec.backend import preload_env
from specdec.drafters import DraftSpec, NgramDrafter, build_drafter
from specdec.drafters.draft_model import DraftModelDrafter
from specdec.drafters.ngram_mod import NgramModDrafter, NgramModTable
from specdec.drafters.suffix import SuffixDrafter
from specdec.engine import generate, token_stream
from specdec.cache.prompt_cache import PrefixStore, load_prompt_cache, make_prompt_cache
from specdec.core.stats import SpecStats

DRAFTERS = {
    "plain": lambda: None,
    "ngram": lambda: NgramDrafter(1, 3),
    "suffix": lambda: SuffixDrafter(),
    "ngram-mod": lambda: NgramModDrafter(NgramModTable(1 << 12, 2)),
    "model": lambda: DraftModelDrafter(cached_tiny("llama", seed=1), max_trim=6),
}


def conversation(model, turns, drafter_name, prompt_cache=None, max_tokens=12):
    """Run a 3-turn conversation on token ids: each turn's prompt is the previous prompt,
    the reply and the next user turn. Returns (outputs, cached prompt tokens per turn)."""
    prompt, outs, cached = [], [], []
    drafter = DRAFTERS[drafter_name]()
    for turn in turns:
        prompt = prompt + turn
        stats = SpecStats()
        out = [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens,
                                             num_draft_tokens=5, stats=stats, prompt_cache=prompt_cache)]
        outs.append(out)
        cached.append(stats.cached_tokens)
        if prompt_cache is not None:
            assert prompt_cache.tokens == (prompt + out)[: len(prompt_cache.tokens)]
            assert len(prompt_cache.tokens) >= len(prompt) + len(out) - 1
        prompt = prompt + out
    return outs, cached


def turns_for(seed):
    rng = random.Random(seed)
    motif = [rng.randrange(64) for _ in range(5)]
    return [(motif * 4)[:17], [rng.randrange(64) for _ in range(3)] + motif * 2, motif[:3] + [7, 8]]


@pytest.mark.parametrize("arch", ["llama", "gemma3"])  # gemma3: an 8-token window, wrapped
@pytest.mark.parametrize("drafter", sorted(DRAFTERS))
def test_a_reused_cache_equals_fresh_calls(arch, drafter):
    model = cached_tiny(arch)
    turns = turns_for(3)
    fresh, none_cached = conversation(model, turns, drafter)
    pc = make_prompt_cache(model, max_draft_tokens=8)
    reused, cached = conversation(model, turns, drafter, pc)
    assert reused == fresh and none_cached == [0, 0, 0]
    assert cached[0] == 0 and all(c > 0 for c in cached[1:])  # turns 2 and 3 skipped their prefix


def test_a_diverging_prompt_rolls_back_or_rebuilds_exactly():
    """A prompt that leaves the cached text early: a plain cache rolls back to the shared
    prefix; a window cache that dropped that prefix is rebuilt (reuse 0), never wrong."""
    for arch, want_reuse in (("llama", True), ("gemma3", False)):
        model = cached_tiny(arch)
        pc = make_prompt_cache(model, max_draft_tokens=4)
        first = [i % 64 for i in range(1, 300)]
        # prefilled in chunks, so the window layers' buffers fill and drop their oldest keys
        list(token_stream(model, first, max_tokens=10, num_draft_tokens=4, prompt_cache=pc,
                           prefill_step_size=16))
        other = first[:5] + [60, 61, 62]
        stats = SpecStats()
        out = [e.token for e in token_stream(model, other, drafter=NgramDrafter(), max_tokens=10,
                                             num_draft_tokens=4, stats=stats, prompt_cache=pc)]
        assert out == [e.token for e in token_stream(model, other, max_tokens=10)]
        assert stats.cached_tokens == (5 if want_reuse else 0)


def test_stop_and_early_close_leave_exactly_the_emitted_tokens(smollm):
    model, tok = smollm
    pc = make_prompt_cache(model)
    r = generate(model, tok, "Count: 1, 2, 3, 4, 5, 6,", drafter="ngram", max_tokens=40,
                 stop=[" 9"], chat=False, prompt_cache=pc)
    assert r.finish_reason == "stop" and len(r.tokens) < 40
    assert pc.tokens == (r.prompt_tokens + r.tokens)[: len(pc.tokens)]
    assert len(pc.tokens) >= len(r.prompt_tokens) + len(r.tokens) - 1
    prompt = r.prompt_tokens + r.tokens
    stream = token_stream(model, prompt, drafter=NgramDrafter(), max_tokens=30, prompt_cache=pc)
    got = [next(stream).token for _ in range(3)]
    stream.close()  # a client that goes away mid-generation
    assert pc.tokens == (prompt + got)[: len(pc.tokens)]
    assert len(prompt) + 2 <= len(pc.tokens) <= len(prompt) + 3


def test_misuse_is_refused(smollm, tmp_path):
    model, tok = smollm
    pc = make_prompt_cache(model, max_draft_tokens=4)
    with pytest.raises(ValueError, match="kv_bits"):
        generate(model, tok, "hi", drafter=None, max_tokens=2, kv_bits=8, prompt_cache=pc)
    with pytest.raises(ValueError, match="max_draft_tokens"):
        generate(model, tok, "hi", max_tokens=2, num_draft_tokens=8, prompt_cache=pc)
    with pytest.raises(ValueError, match="another model"):
        list(token_stream(cached_tiny("llama"), [1, 2, 3], max_tokens=2, prompt_cache=pc))
    with pytest.raises(ValueError, match="empty"):
        pc.save(tmp_path / "empty.safetensors")
    (tmp_path / "junk").write_bytes(b"not a cache")
    with pytest.raises(ValueError, match="not a specdec prompt cache"):
        load_prompt_cache(tmp_path / "junk", model)


@pytest.mark.parametrize("kv_bits", [None, 8])
def test_save_and_load_round_trip(tmp_path, kv_bits):
    # window and plain layers; quantized layers need a head size the group divides
    model = cached_tiny("gemma3") if kv_bits is None else cached_tiny("llama", hidden=128)
    turns = turns_for(5)
    pc = make_prompt_cache(model, max_draft_tokens=6, kv_bits=kv_bits, kv_group_size=32)
    prompt = turns[0] + turns[1]
    drafter = NgramDrafter if kv_bits is None else lambda: None  # a quantized cache decodes plainly
    first = [e.token for e in token_stream(model, prompt, drafter=drafter(), max_tokens=14,
                                           num_draft_tokens=6, kv_bits=kv_bits, kv_group_size=32,
                                           prompt_cache=pc)]
    pc.save(tmp_path / "c.safetensors")
    loaded = load_prompt_cache(tmp_path / "c.safetensors", model)
    assert loaded.tokens == pc.tokens and [type(c) for c in loaded.layers] == [type(c) for c in pc.layers]
    nxt = prompt + first + turns[2]
    kw = dict(max_tokens=14, num_draft_tokens=6, kv_bits=kv_bits, kv_group_size=32)
    ref = [e.token for e in token_stream(model, nxt, drafter=drafter(), prompt_cache=pc, **kw)]
    stats = SpecStats()
    assert [e.token for e in token_stream(model, nxt, drafter=drafter(), prompt_cache=loaded, stats=stats,
                                          **kw)] == ref
    assert stats.cached_tokens > len(prompt)
    with pytest.raises(ValueError, match="another model"):
        load_prompt_cache(tmp_path / "c.safetensors", cached_tiny("qwen2"))


# a chat turn's reply: 24 tokens, 40 before (each turn's reuse is its prefill's; the replies
# re-enter the next prompt either way); 3 plain and 6 speculative turns, ~10 CPU s less
TURN_TOKENS = 24


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["ngram", "suffix"])
def test_chat_conversation_on_real_weights(smollm, drafter):
    """Three chat turns through the chat template: the next turn's prompt re-encodes the
    reply, so reuse stops where the template and the re-tokenised reply differ. Each turn
    equals a fresh plain call, computed once for both drafters (``plain_reference``: the
    turns are the same conversation whatever the drafter, since each reply is plain's)."""
    model, tok = smollm
    pc = make_prompt_cache(model)
    messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    follow = ["Now add a docstring to it.", "Now rename it to flip."]
    prev = []
    for turn in range(3):
        fresh = plain_reference("smollm2-135m", messages, TURN_TOKENS)
        reused = generate(model, tok, messages, drafter=drafter, max_tokens=TURN_TOKENS, prompt_cache=pc)
        assert reused.tokens == fresh.tokens, turn
        assert reused.prompt_tokens[: len(prev)] == prev  # the template only appends
        assert reused.stats.cached_tokens >= len(prev) - 1  # so the whole last prompt is reused
        prev = reused.prompt_tokens
        if turn < 2:
            messages = messages + [{"role": "assistant", "content": reused.text},
                                   {"role": "user", "content": follow[turn]}]


@pytest.mark.slow
@requires_model("gemma3-270m")
def test_gemma_conversation_past_its_window():
    """Gemma 3's 512-token sliding window wraps during turn 1; turn 2 reuses the whole
    cache (its window layers hold the last 512 + slack positions) and equals a fresh call.
    Turn 1 is tests/parity's gemma prompt (490 tokens: the window wraps at its 23rd token,
    not at the 2nd turn's 170th of a 330-token prompt as before)."""
    from parity.test_parity_real import GEMMA_TOKENS, WINDOW, gemma_prompt

    from specdec.core.text import encode_prompt

    model, tok = real_model("gemma3-270m")
    ids = encode_prompt(tok, gemma_prompt(), chat=False)
    assert len(ids) < WINDOW
    pc = make_prompt_cache(model, max_draft_tokens=8)
    drafter = build_drafter(DraftSpec("ngram", num_draft_tokens=8, gate=False))
    first = generate(model, tok, ids, drafter=drafter, num_draft_tokens=8, max_tokens=GEMMA_TOKENS,
                     prompt_cache=pc)
    assert len(ids) + len(first.tokens) > WINDOW
    nxt = ids + first.tokens + encode_prompt(tok, "\n\n# Rename it again:\n", chat=False)
    ungated = DraftSpec("ngram", num_draft_tokens=8, gate=False)  # drafts every step
    # turn 2 decodes 16 tokens (40 before): the reuse is in its prefill, and 16 tokens hold
    # accepted drafts (measured)
    reused = generate(model, tok, nxt, drafter=ungated, max_tokens=16, prompt_cache=pc)
    fresh = generate(model, tok, nxt, drafter=ungated, max_tokens=16)
    assert reused.tokens == fresh.tokens
    assert reused.stats.cached_tokens >= len(ids) + len(first.tokens) - 1
    assert reused.stats.accepted > 0


@pytest.mark.slow
def test_cli_prompt_cache_file(tmp_path):
    path = tmp_path / "conv.safetensors"
    prompt = "Rename x to count: def f(x): return x + 1"

    def run(*extra):
        r = subprocess.run([sys.executable, "-m", "specdec", "generate", "--json", "--max-tokens", "24",
                            "--prompt", prompt, *extra], capture_output=True, text=True,
                           env=preload_env(), timeout=600, check=False)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    first = run("--prompt-cache-file", str(path))
    assert path.exists() and first["stats"]["cached_tokens"] == 0
    again = run("--prompt-cache-file", str(path))  # the same prompt: its prefix is cached
    # equal to plain decoding (in this process: a third CLI process cost ~5 CPU s)
    assert again["tokens"] == first["tokens"] == plain_reference("smollm2-135m", prompt, 24).tokens
    assert again["stats"]["cached_tokens"] == first["stats"]["prompt_tokens"] - 1


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_prefix_store_serves_prefixes_exactly_and_keeps_entries_apart(arch):
    model = cached_tiny(arch)
    store = PrefixStore(model, 1 << 30, max_draft_tokens=8)

    def serve(prompt):
        pc, stats = store.take(prompt), SpecStats()
        out = [e.token for e in token_stream(model, prompt, drafter=NgramDrafter(), max_tokens=10,
                                             stats=stats, prompt_cache=pc)]
        store.put(pc)
        assert out == [e.token for e in token_stream(model, prompt, max_tokens=10)]
        return out, stats.cached_tokens

    a = [i % 60 + 1 for i in range(30)]
    out_a, cached = serve(a)
    assert cached == 0 and len(store.entries) == 1
    b = a[:12] + [61, 62, 63]  # shares 12 tokens: served from a fork, a's entry stays
    _, cached = serve(b)
    assert cached == 12 and len(store.entries) == 2
    c = a + out_a + [5, 6]  # a's next turn: a's entry itself is extended
    _, cached = serve(c)
    assert cached >= len(a) + len(out_a) - 1 and len(store.entries) == 2
    small = PrefixStore(model, 1)  # a budget no cache fits: nothing is kept
    pc = small.take(a)
    list(token_stream(model, a, max_tokens=3, prompt_cache=pc))
    small.put(pc)
    assert small.entries == []
