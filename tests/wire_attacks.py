"""Issue #44's attacks, one table of wire x attack: each runs through every wire (chat
completions, Anthropic's /v1/messages, OpenAI's /v1/responses, Ollama's /api/*) against any
client with ``post``/``get``/``delete`` (starlette's TestClient in process, httpx on a real
server), parametrised by size: the suite runs them small (tests/server/test_attacks.py),
lab/serve-attacks/serve_attacks.py at full size with figures (lab/serve-attacks). Each
returns a plain dict of what it saw; the callers assert."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any

MARK = '"__RAW__"'  # where a body's raw JSON text goes (built as text: no recursion)


def bodies(model: str, text: str = "hi", max_tokens: int = 2) -> dict[str, tuple[str, dict]]:
    """A served request of each wire (path, body)."""
    msgs = [{"role": "user", "content": text}]
    return {
        "chat": ("/v1/chat/completions", {"model": model, "messages": msgs, "max_tokens": max_tokens}),
        "messages": ("/v1/messages", {"model": model, "messages": msgs, "max_tokens": max_tokens}),
        "count_tokens": ("/v1/messages/count_tokens", {"model": model, "messages": msgs}),
        "responses": ("/v1/responses", {"model": model, "input": text, "max_output_tokens": max_tokens}),
        "ollama_chat": ("/api/chat", {"model": model, "messages": msgs, "stream": False,
                                      "options": {"num_predict": max_tokens}}),
        "ollama_generate": ("/api/generate", {"model": model, "prompt": text, "stream": False,
                                              "options": {"num_predict": max_tokens}}),
        "ollama_show": ("/api/show", {"model": model}),
    }


def with_raw(body: dict, key: str, raw: str) -> bytes:
    """``body`` as JSON text with ``raw`` (JSON text, any depth) as the value of ``key``."""
    return json.dumps({**body, key: "__RAW__"}).replace(MARK, raw, 1).encode()


def nested(depth: int, leaf: str = "1") -> str:
    return '{"a": ' * depth + leaf + "}" * depth


def nested_schema(depth: int) -> str:
    return '{"type": "object", "properties": {"x": ' * depth + '{"type": "string"}' + "}}" * depth


def tool_with(wire: str, schema_raw: str) -> str:
    """One function tool in ``wire``'s shape whose parameters are ``schema_raw``."""
    spec = {"messages": {"name": "f", "input_schema": "__RAW__"},
            "responses": {"type": "function", "name": "f", "parameters": "__RAW__"}}.get(
        wire, {"type": "function", "function": {"name": "f", "parameters": "__RAW__"}})
    return "[" + json.dumps(spec).replace(MARK, schema_raw, 1) + "]"


def _send(client: Any, path: str, content: bytes, headers: dict | None = None) -> Any:
    return client.post(path, content=content, headers={"Content-Type": "application/json",
                                                       **(headers or {})})


def deep_bodies(client: Any, model: str, depths: list[int]) -> dict:
    """Each wire's body nested ``depth`` deep (in a field the wire reads, and as the
    whole body): the statuses, by wire and depth."""
    out: dict[str, dict[int, list[int]]] = {}
    for wire, (path, body) in bodies(model).items():
        for d in depths:
            whole = _send(client, path, nested(d).encode()).status_code
            field = _send(client, path, with_raw(body, "metadata", nested(d))).status_code
            out.setdefault(wire, {})[d] = [whole, field]
    return {"statuses": out, "five_xx": _five_xx(out)}


def deep_schemas(client: Any, model: str, depths: list[int]) -> dict:
    """A tool whose schema nests ``depth`` deep, on each wire that takes tools."""
    out: dict[str, dict[int, int]] = {}
    for wire, (path, body) in bodies(model).items():
        if wire in ("ollama_generate", "ollama_show"):
            continue
        for d in depths:
            r = _send(client, path, with_raw(body, "tools", tool_with(wire, nested_schema(d))))
            out.setdefault(wire, {})[d] = r.status_code
    return {"statuses": out, "five_xx": _five_xx(out)}


# a field each wire echoes or stores (or reads as text), and a value that is not JSON text
ECHOED = {"chat": ["metadata", "user", "stop"], "messages": ["metadata", "system", "stop_sequences"],
          "count_tokens": ["system"], "responses": ["metadata", "instructions", "input", "user"],
          "ollama_chat": ["format", "keep_alive"], "ollama_generate": ["system", "prompt", "suffix"],
          "ollama_show": ["name"]}
BAD_VALUES = {"surrogate": '"\\ud800x"', "nan": "NaN", "inf": "Infinity",
              "surrogate_key": '{"\\udfff": "v"}'}


def bad_text(client: Any, model: str) -> dict:
    """Lone surrogates and NaN in every echoed field of every wire: each is a 400."""
    out: dict[str, dict[str, int]] = {}
    for wire, (path, body) in bodies(model).items():
        for key in ECHOED[wire]:
            for name, raw in BAD_VALUES.items():
                out.setdefault(wire, {})[f"{key}={name}"] = _send(client, path, with_raw(body, key, raw)).status_code
    not_400 = {w: {k: s for k, s in c.items() if s != 400} for w, c in out.items()}
    return {"statuses": out, "not_400": {w: c for w, c in not_400.items() if c},
            "five_xx": _five_xx(out)}


WRONG_TOOLS = {
    "chat": [5, [5], [{"type": "function", "function": "x"}], [{"type": "function", "function": {"name": ["f"]}}]],
    "messages": [5, [5], [{"name": ["f"]}], [{"name": "f", "input_schema": 5}]],
    "responses": [5, [5], [{"type": "function", "name": ["f"]}],
                  [{"type": "namespace", "name": "ns", "tools": 5}],
                  [{"type": "namespace", "name": "ns", "tools": [5]}],
                  [{"type": "namespace", "name": ["ns"], "tools": []}]],
    "ollama_chat": [5, [5], [{"function": "x"}], [{"type": "function", "function": {"name": 5}}]],
}


def wrong_tools(client: Any, model: str) -> dict:
    """Wrong-typed tools on every wire that takes them: a 400 (naming the field)."""
    out: dict[str, list] = {}
    for wire, cases in WRONG_TOOLS.items():
        path, body = bodies(model)[wire]
        for tools in cases:
            r = client.post(path, json={**body, "tools": tools})
            out.setdefault(wire, []).append([r.status_code, _message(r)[:120]])
    return {"answers": out, "not_400": {w: [a for a in c if a[0] != 400] for w, c in out.items()
                                        if any(a[0] != 400 for a in c)}}


def _message(r: Any) -> str:
    try:
        err = r.json().get("error")
    except ValueError:
        return r.text
    return err if isinstance(err, str) else (err or {}).get("message", "")


def _five_xx(table: dict) -> int:
    def flat(v: Any) -> list[int]:
        if isinstance(v, dict):
            return [s for x in v.values() for s in flat(x)]
        return [s for x in v for s in flat(x)] if isinstance(v, list) else [v]
    return sum(1 for s in flat(table) if isinstance(s, int) and s >= 500)


# -- the Responses store across keys -------------------------------------------------------


def cross_key(client: Any, model: str, key_a: dict, key_b: dict) -> dict:
    """Key A stores a response holding a secret input item; key B tries GET, DELETE,
    previous_response_id and item_reference on it. Each must be answered as an unknown id
    (same status, same body once the id is swapped); A still reads it afterwards."""
    path, body = bodies(model)["responses"]
    secret = {"type": "message", "role": "user", "id": "msg_t1_secret",
              "content": "The password is hunter2."}
    made = client.post(path, json={**body, "input": [secret], "instructions": "secret notes"},
                       headers=key_a)
    rid = made.json()["id"]
    tries = {
        "get": lambda h, r: client.get(f"/v1/responses/{r}", headers=h),
        "delete": lambda h, r: client.delete(f"/v1/responses/{r}", headers=h),
        "continue": lambda h, r: client.post(path, json={**body, "previous_response_id": r}, headers=h),
        "item_reference": lambda h, r: client.post(path, headers=h, json={**body, "input": [
            {"type": "item_reference", "id": "msg_t1_secret" if r == rid else r}]}),
    }
    out = {}
    for name, go in tries.items():
        theirs, unknown = go(key_b, rid), go(key_b, "resp_unknown0")
        same = theirs.text.replace(rid, "ID").replace("msg_t1_secret", "ID") == \
            unknown.text.replace("resp_unknown0", "ID")
        out[name] = {"status": theirs.status_code, "as_unknown": same and theirs.status_code == unknown.status_code,
                     "leaks": "hunter2" in theirs.text or "secret notes" in theirs.text}
    owner = client.get(f"/v1/responses/{rid}", headers=key_a).status_code
    return {"made": made.status_code, "tries": out, "owner_reads_after": owner,
            "cross_reads": sum(t["status"] < 400 for t in out.values())}


PROBE = """import sys, time, httpx
c = httpx.Client(base_url=sys.argv[1], headers={"Authorization": sys.argv[2]}, timeout=600)
c.get("/health")
print("ready", flush=True)
while sys.stdin.readline().strip() != "stop":
    t0 = time.perf_counter(); c.get("/health"); print(round((time.perf_counter() - t0) * 1000, 2), flush=True)
"""


def many_references(client: Any, model: str, n: int, health: tuple[str, str] | None = None) -> dict:
    """``n`` item_reference items in one request (to a stored item). ``health`` (a base
    URL and an Authorization header): meanwhile /health is read from another process
    (this one's own GIL must not slow the probe), its latencies in ms."""
    import subprocess
    import sys

    path, body = bodies(model)["responses"]
    made = client.post(path, json={**body, "input": [{"type": "message", "role": "user", "id": "msg_ref",
                                                      "content": "hi"}]})
    content = json.dumps({**body, "input": [{"type": "item_reference", "id": "msg_ref"}] * n}).encode()
    probe = None
    if health is not None:
        probe = subprocess.Popen([sys.executable, "-c", PROBE, *health], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        probe.stdout.readline()
    idle, during = [], []

    def read(into: list[float], times: int) -> None:
        for _ in range(times):
            probe.stdin.write("go\n")
            probe.stdin.flush()
            into.append(float(probe.stdout.readline()))

    done = threading.Event()

    def loop() -> None:
        while not done.is_set():
            read(during, 1)

    if probe:
        read(idle, 20)  # /health with nothing running, to compare
        prober = threading.Thread(target=loop)
        prober.start()
    t0 = time.perf_counter()
    r = _send(client, path, content)
    wall = time.perf_counter() - t0
    done.set()
    if probe:
        prober.join()
        probe.stdin.write("stop\n")
        probe.stdin.close()
        probe.wait(60)
    return {"references": n, "body_bytes": len(content), "made": made.status_code,
            "status": r.status_code, "message": _message(r)[:160], "request_s": round(wall, 3),
            "health_probes": len(during), "health_max_ms": max(during, default=None),
            "health_median_ms": sorted(during)[len(during) // 2] if during else None,
            "health_idle_max_ms": max(idle, default=None)}


def statuses(rows: list[int]) -> dict:
    return dict(Counter(rows))


# -- the cached_tokens oracle on every wire ------------------------------------------------


def _cached(wire: str, answer: dict) -> int | None:
    usage = answer.get("usage") or {}
    if wire == "chat":
        return usage["prompt_tokens_details"]["cached_tokens"]
    if wire == "messages":
        return usage["cache_read_input_tokens"]
    if wire == "responses":
        return usage["input_tokens_details"]["cached_tokens"]
    return None  # Ollama's wire reports no cached count


def ask(client: Any, model: str, wire: str, text: str, headers: dict) -> int | None:
    """``text`` as one user turn on ``wire``: the cached prompt tokens it was served with
    (None on Ollama's wire, which reports none)."""
    path, body = bodies(model, text, max_tokens=1)[wire]
    r = client.post(path, json=body, headers=headers)
    assert r.status_code == 200, r.text
    return _cached(wire, r.json())


def oracle(client: Any, model: str, secret: str, victim, attacker,
           wires: tuple[str, ...] = ("chat", "messages", "responses", "ollama_chat")) -> dict:
    """On each wire: the victim (``victim(wire)``: its headers) sends ``secret``, the
    attacker (``attacker(wire)``: another key, or another ``X-Cache-Salt``; a scope of its
    own per wire, so nothing it cached itself counts) sends the same text and reads its
    cached tokens (0 bits: must be 0), then the victim asks again (the control: the
    signal is there, on the victim's side). Ollama's wire reports no cached count: its
    turns are read back through chat completions (the same template)."""
    out = {}
    for wire in wires:
        text = f"[{wire}] {secret}"
        ask(client, model, wire, text, victim(wire))
        probe = "chat" if wire.startswith("ollama") else wire
        out[wire] = {"attacker_cached": ask(client, model, probe, text + " Why?", attacker(wire)),
                     "victim_cached": ask(client, model, probe, text + " When?", victim(wire))}
    return out
