"""Re-record the golden pairs: ``PYTHONPATH=. python3 tests/server/golden/record.py [case ...]``.

Each case drives a real client — the openai, anthropic and ollama SDKs, Claude Code
(``claude -p``) and Codex (``codex exec``) with a short system prompt and no optional
traffic — against the real app served by uvicorn on loopback in front of the scripted worker
(``golden.scripted_app``: no model, every job answers the case's script). A recording ASGI
layer keeps each exchange; ``golden.normalise`` makes it stable; one JSON per case is
written beside this file. Re-record after a deliberate change of a wire's bytes and read the
diff: it is the change every client sees. Cases whose CLI is not installed are skipped."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from tests.server.codex import codex_home
from tests.server.golden import (GOLDEN, KEY, REQUEST_HEADERS, job_view, known_ids, normalise,
                                 scripted_app)

HELLO = ["Hello", "!", " How", " can", " I", " help", "?"]
CALL = ["<tool_call>", '\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}',
        "\n</tool_call>"]
SYSTEM = "You are a terse assistant. Answer in one short sentence."
WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
USER = [{"role": "user", "content": "hi hello"}]


class Recorder:
    """ASGI layer: every HTTP exchange's request and reply, raw."""

    def __init__(self, app, worker):
        self.app, self.worker, self.exchanges = app, worker, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body, reply = bytearray(), {"status": 0, "headers": {}, "body": bytearray()}

        async def rec_receive():
            msg = await receive()
            body.extend(msg.get("body", b""))
            return msg

        async def rec_send(msg):
            if msg["type"] == "http.response.start":
                reply["status"] = msg["status"]
                reply["headers"] = {k.decode().lower(): v.decode() for k, v in msg["headers"]}
            elif msg["type"] == "http.response.body":
                reply["body"].extend(msg.get("body", b""))
            await send(msg)

        before = len(self.worker.requests)
        await self.app(scope, rec_receive, rec_send)
        jobs = [job_view(r, self.worker.tokenizer) for r in self.worker.requests[before:]]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.exchanges.append({"method": scope["method"], "path": scope["path"],
                               "query": scope["query_string"].decode(), "headers": headers,
                               "body": bytes(body).decode(), "reply": reply, "jobs": jobs})


def openai_chat(base):
    import openai
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    c.chat.completions.create(model="gpt-golden", messages=[{"role": "system", "content": SYSTEM}, *USER],
                              temperature=0.7, top_p=0.9, stop=["\n\n"], seed=1, max_tokens=50)
    for _ in c.chat.completions.create(model="gpt-golden", messages=USER, stream=True,
                                       stream_options={"include_usage": True}, logprobs=True,
                                       top_logprobs=2):
        pass
    try:
        c.chat.completions.create(model="gpt-golden", messages=USER, n=2)
    except openai.BadRequestError:
        pass


def openai_chat_tools(base):
    import openai
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    tools = [{"type": "function", "function": WEATHER}]
    r = c.chat.completions.create(model="gpt-golden", messages=USER, tools=tools)
    call = r.choices[0].message.tool_calls[0]
    for _ in c.chat.completions.create(model="gpt-golden", messages=USER, tools=tools, stream=True):
        pass
    turn = [*USER, r.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    c.chat.completions.create(model="gpt-golden", messages=turn, tools=tools)


def openai_completions(base):
    import openai
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    c.completions.create(model="gpt-golden", prompt="hi hello", max_tokens=7, logprobs=2)
    for _ in c.completions.create(model="gpt-golden", prompt="hi hello", max_tokens=7, stream=True):
        pass


def openai_responses(base):
    import openai
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    r = c.responses.create(model="gpt-golden", instructions=SYSTEM, input="hi hello",
                           temperature=0.7, top_p=0.9, max_output_tokens=50)
    c.responses.create(model="gpt-golden", input="hi", previous_response_id=r.id)
    c.responses.retrieve(r.id)
    for _ in c.responses.create(model="gpt-golden", input="hi hello", stream=True, store=False):
        pass
    c.responses.delete(r.id)
    try:
        c.responses.create(model="gpt-golden", input="hi", previous_response_id="resp_missing0")
    except openai.NotFoundError:
        pass


def openai_responses_tools(base):
    import openai
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    tools = [{"type": "function", **WEATHER}]
    r = c.responses.create(model="gpt-golden", input="hi hello", tools=tools)
    call = next(o for o in r.output if o.type == "function_call")
    for _ in c.responses.create(model="gpt-golden", input="hi hello", tools=tools, stream=True):
        pass
    c.responses.create(model="gpt-golden", previous_response_id=r.id, tools=tools, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])


def anthropic_messages(base):
    import anthropic
    c = anthropic.Anthropic(base_url=base, api_key=KEY)
    c.messages.create(model="claude-golden", max_tokens=64, system=SYSTEM, messages=USER,
                      stop_sequences=["\n\n"], extra_body={"temperature": 0.7, "top_p": 0.9})
    with c.messages.stream(model="claude-golden", max_tokens=64, messages=USER) as s:
        s.get_final_message()
    c.messages.count_tokens(model="claude-golden", system=SYSTEM, messages=USER)
    c.messages.create(model="claude-golden", max_tokens=3, messages=USER)
    try:
        c.messages.create(model="other", max_tokens=64, messages=USER)
    except anthropic.NotFoundError:
        pass


def anthropic_tools(base):
    import anthropic
    c = anthropic.Anthropic(base_url=base, api_key=KEY)
    tools = [{"name": WEATHER["name"], "description": WEATHER["description"],
              "input_schema": WEATHER["parameters"]}]
    r = c.messages.create(model="claude-golden", max_tokens=64, messages=USER, tools=tools)
    use = next(b for b in r.content if b.type == "tool_use")
    with c.messages.stream(model="claude-golden", max_tokens=64, messages=USER, tools=tools) as s:
        s.get_final_message()
    turn = [*USER, {"role": "assistant", "content": [b.model_dump() for b in r.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": "sunny"}]}]
    c.messages.create(model="claude-golden", max_tokens=64, messages=turn, tools=tools)


def ollama_api(base):
    import ollama
    c = ollama.Client(host=base, headers={"Authorization": f"Bearer {KEY}"})
    c.chat(model="m", messages=USER, stream=False)
    for _ in c.chat(model="m", messages=USER, stream=True):
        pass
    c.generate(model="m", prompt="hi hello", stream=False)
    for _ in c.generate(model="m", prompt="hi hello", raw=True, stream=True):
        pass
    c.chat(model="m", messages=USER, stream=False, options={"num_predict": 3, "temperature": 0.7,
                                                          "top_p": 0.9, "stop": ["\n\n"], "seed": 1})
    try:
        c.chat(model="nope", messages=USER, stream=False)
    except ollama.ResponseError:
        pass


def ollama_tools(base):
    import ollama
    c = ollama.Client(host=base, headers={"Authorization": f"Bearer {KEY}"})
    tools = [{"type": "function", "function": WEATHER}]
    r = c.chat(model="m", messages=USER, tools=tools, stream=False)
    for _ in c.chat(model="m", messages=USER, tools=tools, stream=True):
        pass
    turn = [*USER, r.message.model_dump(exclude_none=True), {"role": "tool", "content": "sunny",
                                                             "tool_name": "get_weather"}]
    c.chat(model="m", messages=turn, tools=tools, stream=False)


def claude_code(base):
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": KEY,
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_AUTOUPDATER": "1", "HOME": d}
        subprocess.run(["claude", "-p", "--system-prompt", SYSTEM, "--tools", "Read",
                        "--model", "claude-golden", "--output-format", "json", "Say hello."],
                       cwd=d, env=env, capture_output=True, text=True, timeout=300, check=True)


def codex_exec(base):
    with tempfile.TemporaryDirectory() as d:
        env = codex_home(Path(d), base=base, model="gpt-golden", system=SYSTEM, key=KEY)
        subprocess.run(["codex", "exec", "--skip-git-repo-check", "Say hello."], cwd=d, env=env,
                       capture_output=True, text=True, timeout=300, check=True)


CASES = {  # name: (client, script, ending, needs)
    "openai_chat": (openai_chat, HELLO, "stop", None),
    "openai_chat_tools": (openai_chat_tools, CALL, "stop", None),
    "openai_completions": (openai_completions, HELLO, "length", None),
    "openai_responses": (openai_responses, HELLO, "stop", None),
    "openai_responses_tools": (openai_responses_tools, CALL, "stop", None),
    "anthropic_messages": (anthropic_messages, HELLO, "stop", None),
    "anthropic_tools": (anthropic_tools, CALL, "stop", None),
    "ollama_api": (ollama_api, HELLO, "stop", None),
    "ollama_tools": (ollama_tools, CALL, "stop", None),
    "claude_code": (claude_code, ["Hello", "."], "stop", "claude"),
    "codex_exec": (codex_exec, ["Hello", "."], "stop", "codex"),
}


def golden(name: str, script: list[str], ending: str, exchanges: list[dict]) -> dict:
    """The case's file: each exchange's request and normalised reply."""
    ids: dict[str, str] = {}
    out = []
    for x in exchanges:
        headers = {k: v for k, v in x["headers"].items() if k in REQUEST_HEADERS}
        request = {"method": x["method"], "path": known_ids(x["path"], ids), "query": x["query"],
                   "headers": headers, "body": known_ids(x["body"], ids)}
        reply = x["reply"]
        out.append({"request": request, "reply": {
            "status": reply["status"], "content_type": reply["headers"].get("content-type", ""),
            # uvicorn sends no body for a HEAD (the app wrote one): what the client got
            "body": "" if x["method"] == "HEAD" else normalise(bytes(reply["body"]).decode(), ids)},
            "jobs": json.loads(normalise(json.dumps(x["jobs"]), ids))})
    return {"case": name, "script": script, "ending": ending, "exchanges": out}


def record(name: str) -> None:
    client, script, ending, needs = CASES[name]
    if needs and shutil.which(needs) is None:
        print(f"{name}: skipped ({needs} is not installed: make install-agents)")
        return
    app, worker = scripted_app(script, ending)
    rec = Recorder(app, worker)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(rec, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        client(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join()
    path = GOLDEN / f"{name}.json"
    path.write_text(json.dumps(golden(name, script, ending, rec.exchanges), indent=1) + "\n")
    print(f"{name}: {len(rec.exchanges)} exchanges -> {path.name}")


if __name__ == "__main__":
    for case in sys.argv[1:] or CASES:
        record(case)
