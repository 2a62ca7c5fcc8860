"""The KV memory budget (``specdec.server.engine.kv_budget``): a server whose budget holds two
rows of these requests never runs three, answers every request exactly as it answers it
alone, refuses up front a request that could never fit, and clamps one that names no
max_tokens to what fits.

- ``Footprint`` against mlx-lm's own caches: bytes per token of a full-attention model,
  a sliding-window model (stops growing at its window) and an 8-bit KV cache.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import real_model
from serverproc import MODEL, Server

from mlx.utils import tree_flatten

from specdec.server.engine.kv_budget import Footprint, KVBudget

# three requests where the budget holds two rows: one must wait. 16 tokens a row (24 and a
# fourth prompt cost a third more; the clamped request's room is priced from this row too)
MAX_TOKENS = 16
PROMPTS = ["Name three rivers in Europe.", "Name three birds of prey.", "Name three planets."]


def test_footprint_counts_what_the_caches_hold(smollm):
    model, _ = smollm
    fp = Footprint.measure(model)
    args = model.args
    per_token = 2 * args.num_key_value_heads * (args.hidden_size // args.num_attention_heads) * 4  # fp32 k, v
    assert fp.per_token == ((per_token, None),) * args.num_hidden_layers and fp.fixed == 0
    assert fp.row_bytes(10) == 10 * per_token * args.num_hidden_layers
    assert Footprint.measure(model, kv_bits=8).row_bytes(64) < fp.row_bytes(64) / 2
    budget = KVBudget(fp.row_bytes(100) + 1, fp)
    assert budget.longest == 100 and budget.fits(1, 100) and not budget.fits(2, 100)


@pytest.mark.slow
def test_a_sliding_window_stops_growing_at_its_window():
    model, _ = real_model("gemma3-270m")
    fp = Footprint.measure(model)
    windows = {w for _, w in fp.per_token}
    assert windows == {None, 512}  # Gemma 3: local layers of 512, a global one every sixth
    grow = fp.row_bytes(2000) - fp.row_bytes(1000)
    assert grow == 1000 * sum(b for b, w in fp.per_token if w is None)


@pytest.fixture(scope="module")
def served(smollm):
    """A server whose budget holds two rows of these requests, not three."""
    _, tok = smollm
    lengths = [len(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True))
               for p in PROMPTS]
    row = max(lengths) + MAX_TOKENS
    fp = Footprint.measure(smollm[0])
    budget = int(2.5 * fp.row_bytes(row))
    s = Server("--kv-budget", str(budget))
    yield s, budget, lengths, fp
    s.stop()


def ask(server, prompt, **kw):
    r = server.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], **kw)
    return r.choices[0].message.content, r.usage


@pytest.mark.slow
def test_a_batch_never_outgrows_its_kv_budget_and_each_answer_is_its_solo_one(served):
    server, budget, lengths, fp = served
    kv = server.health()["kv"]
    assert kv["budget_bytes"] == budget and kv["reserved_bytes"] == 0
    assert kv["longest_request_tokens"] == budget // fp.row_bytes(1)
    solo = []
    for p, n in zip(PROMPTS, lengths):
        text, usage = ask(server, p, max_tokens=MAX_TOKENS)
        assert usage.prompt_tokens == n  # the rows the fixture priced
        solo.append(text)
    seen, done = {"running": 0, "reserved": 0.0}, threading.Event()

    def watch():
        while not done.is_set():
            seen["running"] = max(seen["running"], server.metric("specdec_requests_running"))
            seen["reserved"] = max(seen["reserved"], server.metric("specdec_kv_reserved_bytes"))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            together = list(pool.map(lambda p: ask(server, p, max_tokens=MAX_TOKENS)[0], PROMPTS))
    finally:
        done.set()
        watcher.join()
    assert together == solo
    assert seen["running"] == 2  # two rows batched, never a third
    assert 0 < seen["reserved"] <= budget
    assert server.metric("specdec_kv_budget_bytes") == budget


@pytest.mark.slow
def test_a_request_that_never_fits_is_refused_and_one_without_max_tokens_is_clamped(served):
    server, _, lengths, _ = served
    longest = server.health()["kv"]["longest_request_tokens"]
    r = server.http().post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": longest})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "kv_budget_exceeded" and "--kv-budget" in err["message"]
    _, usage = ask(server, "Count from one to one thousand in words.")
    assert usage.prompt_tokens + usage.completion_tokens <= longest


def test_a_started_server_gives_mlx_the_limits_its_budgets_make():
    """A real worker start (the server's, model loaded): mlx holds the memory limit of
    weights + twice the KV budget (a join copies the batch cache) + prompt cache +
    headroom, and the small buffer cache."""
    import mlx.core as mx

    from specdec.server.config import ServerConfig
    from specdec.server.engine.kv_budget import ACTIVATION_FLOOR, CACHE_LIMIT
    from specdec.server.http.metrics import Metrics
    from specdec.server.engine.worker import InferenceWorker

    before = mx.get_memory_limit(), mx.set_cache_limit(1 << 30)
    budget, prompt_cache = 40 << 20, 8 << 20
    w = InferenceWorker(ServerConfig(kv_budget=budget, prompt_cache_bytes=prompt_cache), Metrics())
    try:
        w.start()
        lim = w.limits
        weights = sum(v.nbytes for _, v in tree_flatten(w.model.parameters()))
        assert (lim.weights, lim.kv_peak, lim.prompt_cache) == (weights, 2 * budget, prompt_cache)
        assert lim.headroom >= ACTIVATION_FLOOR
        assert lim.memory_limit == weights + 2 * budget + prompt_cache + lim.headroom
        assert mx.get_memory_limit() == lim.memory_limit  # read back from mlx
        assert mx.set_cache_limit(before[1]) == lim.cache_limit == CACHE_LIMIT
    finally:
        w.stop()
        mx.set_memory_limit(before[0])
        mx.set_cache_limit(before[1])
