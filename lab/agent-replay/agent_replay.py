"""Replay a coding agent's session through every wire, timed end to end, in one run.

    python lab/agent-replay/agent_replay.py --model qwen2.5-coder-0.5b --out lab/agent-replay/results.json

The session is what an agent sends (every request whole, tool results included): a task,
the agent's ``read_file`` call and its result (``textwrap.dedent``'s source, as JSON), a forced
``write_file`` whose content is the edited file (the quoting turn), and the closing turn.
Each request is replayed through ``/v1/messages`` (Anthropic), ``/v1/responses`` (OpenAI
Responses) and ``/v1/chat/completions`` on ``specdec serve`` with its defaults, on
``specdec serve --draft-type none`` (speculation off), and through chat completions on
``mlx_lm.server`` (same float32 weights; it cannot force a tool call, so its answers to
the forced turn are not comparable and are marked so). Servers run one at a time, each
fresh. Reported per server and surface: seconds per request, the speedup over speculation
off, and whether every answer equals the same request's answer with speculation off.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve-throughput-vs-mlx-lm"))
from serve_load import converted_dir, mlx_lm_spec, running  # noqa: E402  (servers started alike)

FILE = "dedent.py"
SOURCE = inspect.getsource(textwrap.dedent)
EDITED = SOURCE.replace("def dedent(", "def remove_indent(")
# as specdec.prompts.agent_transcript("write_file") (the bench's agent class) asks it
TASK = (f"Rename the function dedent in {FILE} to remove_indent. Read the file, then write "
        "back the complete updated file.")
SYSTEM = "You are a coding agent. Use the tools to read and write files; reply briefly."
TOOLS = [
    {"name": "read_file", "description": "Read a text file",
     "schema": {"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]}},
    {"name": "write_file", "description": "Write the complete new contents of a file",
     "schema": {"type": "object", "properties": {"path": {"type": "string"},
                                                 "content": {"type": "string"}},
                "required": ["path", "content"]}},
]


@dataclass
class Turn:
    """One request of the session: the history so far, the tool choice, the length cap."""

    history: list[dict]  # {"user": text} | {"call": name, "args": {...}} | {"result": text}
    force: str | None
    max_tokens: int


def session() -> list[Turn]:
    read = {"call": "read_file", "args": {"path": FILE}, "id": "call_1"}
    write = {"call": "write_file", "args": {"path": FILE, "content": EDITED}, "id": "call_2"}
    h1 = [{"user": TASK}]
    # tool results as JSON, as agent frameworks return them
    h2 = h1 + [read, {"result": json.dumps({"content": SOURCE}), "id": "call_1"}]
    h3 = h2 + [write, {"result": "File written.", "id": "call_2"}]
    return [Turn(h1, None, 48), Turn(h2, "write_file", 800), Turn(h3, None, 48)]


def anthropic_body(t: Turn, model: str) -> dict:
    msgs: list[dict] = []
    for h in t.history:
        if "user" in h:
            msgs.append({"role": "user", "content": h["user"]})
        elif "call" in h:
            msgs.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": h["id"], "name": h["call"], "input": h["args"]}]})
        else:
            msgs.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": h["id"], "content": h["result"]}]})
    choice = {"type": "tool", "name": t.force} if t.force else {"type": "auto"}
    return {"model": model, "system": SYSTEM, "messages": msgs, "max_tokens": t.max_tokens,
            "tools": [{"name": x["name"], "description": x["description"],
                       "input_schema": x["schema"]} for x in TOOLS],
            "tool_choice": choice, "temperature": 0}


def responses_body(t: Turn, model: str) -> dict:
    items: list[dict] = []
    for h in t.history:
        if "user" in h:
            items.append({"role": "user", "content": h["user"]})
        elif "call" in h:
            items.append({"type": "function_call", "call_id": h["id"], "name": h["call"],
                          "arguments": json.dumps(h["args"])})
        else:
            items.append({"type": "function_call_output", "call_id": h["id"],
                          "output": h["result"]})
    choice = {"type": "function", "name": t.force} if t.force else "auto"
    return {"model": model, "instructions": SYSTEM, "input": items, "store": False,
            "max_output_tokens": t.max_tokens, "tool_choice": choice, "temperature": 0,
            "tools": [{"type": "function", "name": x["name"], "description": x["description"],
                       "parameters": x["schema"]} for x in TOOLS]}


def chat_body(t: Turn, model: str) -> dict:
    msgs: list[dict] = [{"role": "system", "content": SYSTEM}]
    for h in t.history:
        if "user" in h:
            msgs.append({"role": "user", "content": h["user"]})
        elif "call" in h:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": h["id"], "type": "function",
                 "function": {"name": h["call"], "arguments": json.dumps(h["args"])}}]})
        else:
            msgs.append({"role": "tool", "tool_call_id": h["id"], "content": h["result"]})
    choice = {"type": "function", "function": {"name": t.force}} if t.force else "auto"
    return {"model": model, "messages": msgs, "max_tokens": t.max_tokens, "temperature": 0,
            "tool_choice": choice,
            "tools": [{"type": "function", "function": {"name": x["name"], "description":
                       x["description"], "parameters": x["schema"]}} for x in TOOLS]}


def answer(surface: str, body: dict) -> dict:
    """What came back, the same way for every surface: text and calls (name, arguments)."""
    calls, text = [], ""
    if surface == "messages":
        for b in body["content"]:
            if b["type"] == "text":
                text += b["text"]
            elif b["type"] == "tool_use":
                calls.append([b["name"], b["input"]])
    elif surface == "responses":
        for item in body["output"]:
            if item["type"] == "message":
                text += "".join(c.get("text", "") for c in item["content"])
            elif item["type"] == "function_call":
                calls.append([item["name"], json.loads(item["arguments"])])
    else:
        msg = body["choices"][0]["message"]
        text = msg.get("content") or ""
        for c in msg.get("tool_calls") or []:
            calls.append([c["function"]["name"], json.loads(c["function"]["arguments"])])
    return {"text": text, "calls": calls}


SURFACES = {"messages": ("/v1/messages", anthropic_body),
            "responses": ("/v1/responses", responses_body),
            "chat": ("/v1/chat/completions", chat_body)}


@dataclass
class Replay:
    server: str
    surface: str
    seconds: list[float] = field(default_factory=list)
    answers: list[dict] = field(default_factory=list)


def replay(srv: dict, surface: str, turns: list[Turn]) -> Replay:
    path, render = SURFACES[surface]
    out = Replay(srv["label"], surface)
    with httpx.Client(timeout=1800) as client:
        for t in turns:
            start = time.perf_counter()
            r = client.post(srv["base"] + path, json=render(t, srv["model_field"]))
            out.seconds.append(time.perf_counter() - start)
            r.raise_for_status()
            out.answers.append(answer(surface, r.json()))
    return out


def table(replays: list[Replay]) -> list[str]:
    plain = {r.surface: r for r in replays if r.server == "ours plain"}
    lines = ["| server | surface | s per request (task / forced write_file / close) | total s "
             "| vs speculation off | answers equal speculation off |", "|---|---|---|---|---|---|"]
    for r in replays:
        base = plain.get(r.surface) or plain.get("chat")
        ratio = sum(base.seconds) / sum(r.seconds) if base else float("nan")
        same = "yes" if base and r.answers == base.answers else "no (cannot force tools)" \
            if r.server == "mlx_lm" else "NO"
        lines.append(f"| {r.server} | {r.surface} | {' / '.join(f'{s:.1f}' for s in r.seconds)} "
                     f"| {sum(r.seconds):.1f} | {ratio:.2f}x | {same} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b", help="packaged name or .gguf")
    ap.add_argument("--peer", choices=("mlx_lm", "none"), default="mlx_lm")
    ap.add_argument("--surfaces", default=",".join(SURFACES),
                    help="which of ours to replay (mlx_lm serves chat only), e.g. messages")
    ap.add_argument("--out", help="write every measurement as one JSON file")
    args = ap.parse_args()
    model_dir = converted_dir(args.model)
    ours = [sys.executable, "-m", "specdec", "serve", "--model", args.model, "--dtype",
            "float32", "--log-level", "warning"]
    specs = [{"label": "ours default", "argv": ours, "model_field": args.model},
             {"label": "ours plain", "argv": ours + ["--draft-type", "none"],
              "model_field": args.model}]
    if args.peer == "mlx_lm":
        specs.append(mlx_lm_spec(model_dir))
    surfaces = [s for s in args.surfaces.split(",") if s]
    if not surfaces or set(surfaces) - set(SURFACES):
        raise SystemExit(f"--surfaces takes some of {', '.join(SURFACES)}")
    turns, replays = session(), []
    for spec in specs:
        for surface in (surfaces if spec["label"] != "mlx_lm" else ("chat",)):
            with running(spec) as srv:  # fresh per surface: no cache carries over
                replays.append(replay(srv, surface, turns))
                print(json.dumps(replays[-1].__dict__), flush=True)  # whole: a cut run keeps it
    lines = table(replays)
    print("\n".join(lines))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"model": args.model, "replays": [
            r.__dict__ for r in replays], "table": lines}, indent=1))


if __name__ == "__main__":
    main()
