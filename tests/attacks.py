"""The attacks of issue #34 item 7 on a real ``specdec serve``, parametrised by size: the
suite runs them small (tests/server/test_attacks.py), lab/serve-attacks/serve_attacks.py at full
size with figures. Each returns a plain dict of what it measured; the callers assert."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import socket
import time

import httpx
from serverproc import MODEL, Server, wait_for

SHORT = {"model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}],
         "max_tokens": 4}


def rss_kib(pid: int) -> dict[str, int]:
    """Resident memory now and its peak (VmRSS, VmHWM) from /proc, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}


def idle(server: Server) -> bool:
    h = server.health()
    return h["queue_depth"] == 0 and not h["running"]


def alive(server: Server) -> bool:
    """The process runs, /health is ok and it answers a short chat request."""
    if server.proc.poll() is not None:
        return False
    r = server.http(timeout=600).post("/v1/chat/completions", json=SHORT)
    return r.status_code == 200 and server.health()["status"] == "ok"


def fuzz(server: Server, examples: int) -> dict:
    """schemathesis generates requests for every operation of the server's OpenAPI schema
    (valid and invalid); counts the statuses per operation. No 5xx is the pass."""
    import schemathesis

    schema = schemathesis.openapi.from_url(server.base + "/openapi.json", headers=server.headers())
    statuses: dict[str, collections.Counter] = {}
    five_xx: list[str] = []
    with httpx.Client(base_url=server.base, headers=server.headers(), timeout=600) as http:
        for result in schema.get_all_operations():
            op = result.ok()

            _fuzz_operation(http, server, op, examples, statuses.setdefault(op.label, collections.Counter()),
                            five_xx)
    return {"operations": len(statuses), "requests": sum(sum(c.values()) for c in statuses.values()),
            "statuses": {k: dict(sorted(c.items())) for k, c in sorted(statuses.items())},
            "five_xx": len(five_xx), "five_xx_examples": five_xx[:5], "alive": alive(server)}


def _fuzz_operation(http: httpx.Client, server: Server, op, examples: int,
                    seen: collections.Counter, five_xx: list[str]) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=_strategy(op), served=st.booleans())
    def one(case, served):
        case, free = case
        if served and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = MODEL  # past the unknown-model check, into the handlers
        kw = case.as_transport_kwargs(base_url=server.base)
        if free is not None:
            kw["json"] = free
            kw["headers"] = {**(kw.get("headers") or {}), "Content-Type": "application/json"}
        r = http.request(kw["method"], kw["url"], params=kw.get("params"),
                         headers={**(kw.get("headers") or {}), **server.headers()}, content=_body(kw))
        seen[r.status_code] += 1
        if r.status_code >= 500:
            five_xx.append(f"{op.label} {r.status_code} {_body(kw)[:300]!r} {r.text[:300]}")

    one()


# the surfaces whose handlers read the raw JSON (no body schema for schemathesis to
# follow): a served request of each, whose fields the fuzzer then replaces or adds to
MESSAGES = [{"role": "user", "content": "hi"}]
FREE_BODIES = {
    "POST /api/chat": {"model": MODEL, "messages": MESSAGES, "stream": False},
    "POST /api/generate": {"model": MODEL, "prompt": "hi", "stream": False},
    "POST /api/show": {"model": MODEL},
    "POST /v1/messages": {"model": MODEL, "max_tokens": 2, "messages": MESSAGES},
    "POST /v1/messages/count_tokens": {"model": MODEL, "messages": MESSAGES},
    "POST /v1/responses": {"model": MODEL, "input": "hi", "max_output_tokens": 2},
}
FREE_FIELDS = ("stream", "options", "format", "tools", "tool_choice", "system", "think",
               "raw", "template", "images", "keep_alive", "stop_sequences", "temperature",
               "top_p", "top_k", "metadata", "instructions", "text", "reasoning", "store",
               "previous_response_id", "thinking", "output_config", "suffix", "context")


def _free_body(label: str):
    from hypothesis import strategies as st

    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=8)
    base = FREE_BODIES[label]
    keys = st.sampled_from(sorted(set(base) | set(FREE_FIELDS)))
    return st.dictionaries(keys, values, max_size=3).map(lambda extra: {**base, **extra})


def _strategy(op):
    """Valid requests and, where the schema can be negated, invalid ones."""
    from hypothesis import strategies as st
    from schemathesis.generation import GenerationMode

    if op.label in FREE_BODIES:
        return st.tuples(op.as_strategy(), _free_body(op.label))
    strategies = [op.as_strategy(generation_mode=GenerationMode.POSITIVE)]
    try:
        strategies.append(op.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    except Exception:  # noqa: BLE001 (nothing in this operation's schema to negate)
        pass
    return st.tuples(st.one_of(strategies), st.none())


def _body(kw: dict) -> bytes:
    if kw.get("json") is not None:
        return json.dumps(kw["json"]).encode()
    data = kw.get("data") or kw.get("content") or b""
    return data.encode() if isinstance(data, str) else data


async def _flood(base: str, headers: dict, bodies: list[dict], path: str) -> list[tuple[int, str | None]]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=3600) as c:
        async def one(body):
            try:
                r = await c.post(path, json=body)
                return r.status_code, r.headers.get("retry-after")
            except httpx.TransportError as e:
                return -1, type(e).__name__
        return await asyncio.gather(*(one(b) for b in bodies))


def concurrent(server: Server, n: int) -> dict:
    """n chat requests at once: each is answered 200 or 503 with Retry-After; nothing dies."""
    t0 = time.monotonic()
    out = asyncio.run(_flood(server.base, server.headers(), [SHORT] * n, "/v1/chat/completions"))
    wall = time.monotonic() - t0
    counts = collections.Counter(s for s, _ in out)
    no_retry = sum(1 for s, ra in out if s == 503 and not (ra and ra.isdigit() and int(ra) >= 1))
    wait_for(lambda: idle(server), timeout=600, what="the queue to drain")
    return {"requests": n, "statuses": dict(sorted(counts.items())), "ok": counts[200],
            "503": counts[503], "503_without_retry_after": no_retry,
            "other": n - counts[200] - counts[503], "wall_s": round(wall, 1),
            "alive": alive(server)}


def long_prompt(words: int) -> str:
    return " ".join(f"item{i % 997}" for i in range(words))


def reset_peak(pid: int) -> bool:
    """Restart VmHWM from VmRSS (Linux's clear_refs 5): a peak of the attack, not of the
    model's load. False where the kernel refuses (the peak then counts from start)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def flood(server: Server, n_long: int, long_words: int, n_short: int) -> dict:
    """n_long near-context prompts sent together with n_short short questions; the server's
    peak resident memory during the flood (VmHWM) against its resident memory before it
    plus the KV budget (and the prompt cache's bytes, its own budget); every short request
    answered."""
    pid = server.proc.pid
    health = server.health()
    budget, limits = health["kv"]["budget_bytes"], health["mlx_limits"]
    longs = [{"model": MODEL, "max_tokens": 8, "messages": [
        {"role": "user", "content": f"{i}: " + long_prompt(long_words)}]} for i in range(n_long)]
    shorts = [{**SHORT, "messages": [{"role": "user", "content": f"Name colour number {i}."}]}
              for i in range(n_short)]
    reset = reset_peak(pid)
    before = rss_kib(pid)["VmRSS"] * 1024
    t0 = time.monotonic()
    out = asyncio.run(_flood(server.base, server.headers(), longs + shorts, "/v1/chat/completions"))
    wall = time.monotonic() - t0
    peak = rss_kib(pid)["VmHWM"] * 1024
    return {"long": n_long, "long_words": long_words, "short": n_short,
            "long_statuses": dict(collections.Counter(s for s, _ in out[:n_long])),
            "short_statuses": dict(collections.Counter(s for s, _ in out[n_long:])),
            "budget_bytes": budget, "mlx_limits": limits, "peak_reset": reset,
            "rss_before_bytes": before, "peak_rss_bytes": peak, "peak_over_before_bytes": peak - before,
            "within": peak <= before + budget + limits["prompt_cache_bytes"],
            "wall_s": round(wall, 1), "alive": alive(server)}


def _slow_socket(port: int, body: bytes) -> socket.socket:
    """A slowloris: headers and half of the body sent, the rest never."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
              + b"Content-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
    return s


def _stopped_reader(port: int, body: bytes) -> socket.socket:
    """A streamed request whose client will stop reading (a small receive buffer fills fast)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
              + b"Content-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def _first_event(s: socket.socket) -> int | None:
    """Reads the response's status and, on a 200, its first SSE event, then stops: nobody
    reads this socket again until the slots are checked. The status (200: the stream got
    a batch slot; 503: refused) or None if nothing came."""
    s.settimeout(600)
    got = b""
    try:
        while not (b"\r\n\r\n" in got and (not got.startswith(b"HTTP/1.1 200")
                                             or b"data:" in got.split(b"\r\n\r\n", 1)[1])):
            chunk = s.recv(1024)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    head = got.split(b" ", 2)
    return int(head[1]) if len(head) > 1 and head[1].isdigit() else None


def _reader_outcome(s: socket.socket) -> str:
    """Reads the rest of a stopped reader's stream: "ended" (its generation finished: a
    finish_reason came), "cancelled" (the stream closed without one: the bounded event
    buffer overflowed and the job was cancelled) or "open" (nothing closed it)."""
    s.settimeout(60)
    got = b""
    try:
        while b"data: [DONE]" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    if re.search(rb'"finish_reason": "(length|stop)"', got):
        return "ended"
    return "cancelled" if b"data: [DONE]" in got else "open"


def _cancelled(server: Server) -> float:
    """The server's count of cancelled generations (its /metrics)."""
    text = server.http(timeout=60).get("/metrics").text
    m = re.search(r"^specdec_requests_cancelled_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def slowloris(server: Server, n_slow: int, n_readers: int, reader_tokens: int) -> dict:
    """n_readers streams that each get their first event and then stop reading (socket
    kept open), and only then n_slow sockets that never finish their body. While they
    hang, a short request is answered (or refused with 503); the batch and queue empty
    with the readers still stalled (each reader's generation ended, or was cancelled when
    its bounded event buffer overflowed), the slow sockets get 408 (body-read timeout) or
    503, and resident memory is back near where it was."""
    before, cancelled0 = rss_kib(server.proc.pid)["VmRSS"], _cancelled(server)
    reader = json.dumps({**SHORT, "stream": True, "max_tokens": reader_tokens, "logprobs": True,
                         "top_logprobs": 20, "speculative": {"draft_type": "none"}}).encode()
    readers = [_stopped_reader(server.port, reader) for _ in range(n_readers)]
    reader_statuses = [_first_event(s) for s in readers]  # then nobody reads them
    t0 = time.monotonic()
    slow = [_slow_socket(server.port, json.dumps(SHORT).encode()) for _ in range(n_slow)]
    during = server.http(timeout=600).post("/v1/chat/completions", json=SHORT).status_code
    wait_for(lambda: idle(server), timeout=1800, what="the slots to return")
    freed_s = time.monotonic() - t0  # the readers still stalled, their sockets open
    cancelled = _cancelled(server) - cancelled0
    answered = collections.Counter(_read_status(s) for s in slow)
    outcomes = collections.Counter(_reader_outcome(s) for s, st in zip(readers, reader_statuses)
                                   if st == 200)
    for s in slow + readers:
        s.close()
    wait_for(lambda: idle(server), timeout=60, what="the slots to return")
    after = rss_kib(server.proc.pid)["VmRSS"]
    return {"slow_sockets": n_slow, "stopped_readers": n_readers, "reader_max_tokens": reader_tokens,
            "reader_statuses": {str(k): v for k, v in collections.Counter(reader_statuses).items()},
            "reader_outcomes": dict(outcomes), "cancelled_by_server": int(cancelled),
            "short_request_during": during, "slow_statuses": {str(k): v for k, v in answered.items()},
            "batch_idle_with_readers_stalled_after_s": round(freed_s, 1),
            "rss_before_bytes": before * 1024, "rss_after_bytes": after * 1024, "alive": alive(server)}


# -- one row raising mid-batch, in process (the loop the server's batcher runs) -----------------------------------------------


def row_raises(loaded, rows: int, max_tokens: int) -> dict:
    """``rows`` requests batched; row 1's drafter raises on its third proposal. The batch
    loop the server runs (``decode.loop.step``) hands that row its ``RowFailed``; every
    other row's tokens must equal its solo run's."""
    from specdec.decode import loop
    from specdec.decode.batch import Batch, RowFailed
    from specdec.decode.generation import Generation
    from specdec.decode.request import Request
    from specdec.drafters import NgramDrafter
    from specdec.engine import token_stream
    from specdec.prompts import short_questions

    class Faulty(NgramDrafter):
        calls = 0

        def propose(self, context, k):
            self.calls += 1
            if self.calls == 3:
                raise KeyError("drafter bug")
            return super().propose(context, k)

    model, tok = loaded
    prompts = [tok.encode(q) for q in short_questions()[:rows]]
    reqs = []
    for i, p in enumerate(prompts):
        req = Request(model, p, Generation.of(max_tokens=max_tokens, num_draft_tokens=4),
                      drafter=Faulty(1, 3) if i == 1 else NgramDrafter(1, 3))
        req.start()
        req.prefill()
        reqs.append(req)
    batch = Batch(model, lambda n: 1.0, learn=False)  # a flat cost: every row drafts
    for r in reqs:
        batch.join(r.row(), r.layers)
    live, out, failed = list(range(rows)), {i: [] for i in range(rows)}, []
    t0 = time.monotonic()
    while live:
        try:
            steps = loop.step(batch)
        except RowFailed as e:
            failed.append(live.pop(e.row))
            batch.leave_rows([e.row])
            continue
        for i, s in zip(live, steps):
            if s.error is not None:  # failed after its step (as the server's batcher reads it)
                failed.append(i)
                continue
            out[i] += [e.token for e in reqs[i].feed(s)]
        done = [j for j, i in enumerate(live) if reqs[i].finish_reason or i in failed]
        batch.leave_rows(done)
        live = [i for j, i in enumerate(live) if j not in done]
    wall = time.monotonic() - t0
    solo = {i: [e.token for e in token_stream(model, prompts[i], drafter=NgramDrafter(1, 3),
                                              max_tokens=max_tokens, num_draft_tokens=4)]
            for i in range(rows) if i != 1}
    return {"rows": rows, "max_tokens": max_tokens, "failed_rows": failed,
            "rows_equal_to_solo": sum(out[i] == solo[i] for i in solo), "other_rows": len(solo),
            "batched_wall_s": round(wall, 1)}


def _read_status(s: socket.socket) -> int | None:
    s.settimeout(60)
    try:
        head = s.recv(64).split(b" ")
        return int(head[1]) if len(head) > 1 and head[1].isdigit() else None
    except OSError:
        return None
