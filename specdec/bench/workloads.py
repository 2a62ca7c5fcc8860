"""Benchmark workloads: the JSONL format, the built-in set, and fitting prompts to a length.

Contract: ``load_workloads(path)`` validates a JSONL file (``class`` and exactly one of
``prompt``/``messages``; optional ``name``, ``turns``, ``max_tokens``, ``source``,
``response_format``, ``tools``, ``tool_choice``) naming the bad line and field;
``builtin_workloads()`` builds every class from real text this project did not write;
``fit_prompt(tokenizer, workload, n)`` cuts or pads to ``n`` tokens, never touching the final
instruction. Tests: tests/bench/test_workloads.py, tests/bench/test_runner.py.
The format in full: docs/bench.md#workloads."""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from ..prompts import agent_transcript, json_records, source_of, zen_text
from ..core.grammar import response_grammar
from ..core.text import encode_prompt
from ..toolcall.prompt import forced_call_schema, forced_response_format, template_messages

CLASSES = ("code_edit", "passage", "json_rag", "structured", "multi_turn_edit", "summarization",
           "open_ended", "agent")
ECHO_CLASSES = tuple(c for c in CLASSES if c != "open_ended")
STDLIB = "Python standard library (PSF licence), read from this machine at run time"
RECORD_FORMAT = {"type": "json_schema", "json_schema": {"name": "record", "schema": {
    "type": "object", "additionalProperties": False, "required": ["name", "version", "summary"],
    "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                   "summary": {"type": "string"}}}}}


@dataclass(frozen=True)
class Workload:
    name: str
    cls: str
    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    turns: tuple[str, ...] = ()
    max_tokens: int | None = None
    source: str = ""
    prompt_tokens: int | None = field(default=None, compare=False)  # set by fit_prompt
    response_format: dict | None = field(default=None, hash=False)  # OpenAI's: a JSON schema
    tools: tuple[dict, ...] = field(default=(), hash=False)
    tool_choice: Any = field(default=None, hash=False)  # forcing: response_format holds its schema

    def first_messages(self) -> Any:
        """The first turn as ``encode_prompt`` takes it (text or messages)."""
        return self.prompt if self.prompt is not None else template_messages(self.chat())

    def chat(self) -> list[dict]:
        """A chat workload's messages (one that has no text ``prompt``)."""
        if self.messages is None:
            raise ValueError(f"workload {self.name!r} has neither a prompt nor messages")
        return list(self.messages)

    def encode(self, tokenizer: Any, prompt: Any = None) -> list[int]:
        """Token ids of ``prompt`` (default: the first turn) with this workload's tools."""
        return encode_prompt(tokenizer, self.first_messages() if prompt is None else prompt,
                             tools=list(self.tools) or None)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "class": self.cls}
        if self.prompt is not None:
            d["prompt"] = self.prompt
        else:
            d["messages"] = self.chat()
        fmt = None if self.tool_choice else self.response_format
        for key, value in (("turns", list(self.turns)), ("max_tokens", self.max_tokens),
                           ("source", self.source), ("response_format", fmt),
                           ("tools", list(self.tools)), ("tool_choice", self.tool_choice)):
            if value:
                d[key] = value
        return d


def parse_workload(obj: Any, where: str = "workload", line: int | None = None) -> Workload:
    """A Workload from one decoded JSON object; ValueError names the field to fix.

    Without a ``name``, the workload is named ``<class>-<line>``; ``line`` (the 1-based
    line number in its file) is then required.

    >>> parse_workload({"class": "chat", "prompt": "Hi."}, line=3).name
    'chat-3'
    """
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    unknown = set(obj) - {"name", "class", "prompt", "messages", "turns", "max_tokens", "source",
                          "response_format", "tools", "tool_choice"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
    if "name" not in obj and line is None:
        raise ValueError(f"{where}: 'name' is required outside a workload file")
    for key in ("name", "class") if "name" in obj else ("class",):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise ValueError(f"{where}: '{key}' must be a non-empty string")
    if ("prompt" in obj) == ("messages" in obj):
        raise ValueError(f"{where}: give exactly one of 'prompt' or 'messages'")
    if "prompt" in obj and (not isinstance(obj["prompt"], str) or not obj["prompt"].strip()):
        raise ValueError(f"{where}: 'prompt' must be a non-empty string")
    messages = obj.get("messages")
    if messages is not None:
        ok = isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and (isinstance(m.get("content"), str) or m.get("tool_calls")) for m in messages)
        if not ok or messages[-1]["role"] not in ("user", "tool"):
            raise ValueError(f"{where}: 'messages' must be a non-empty list of "
                             "{role, content} objects ending with a user (or tool) message")
    tools, choice, fmt = _tools(obj, where)
    turns = obj.get("turns", [])
    if not isinstance(turns, list) or not all(isinstance(t, str) and t for t in turns):
        raise ValueError(f"{where}: 'turns' must be a list of non-empty strings")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"{where}: 'max_tokens' must be a positive integer")
    if fmt is not None:
        try:
            response_grammar(fmt)
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{where}: 'response_format': {e}") from None
    name = obj.get("name", f"{obj['class']}-{line}")
    return Workload(name, obj["class"], obj.get("prompt"),
                    tuple(messages) if messages is not None else None, tuple(turns),
                    max_tokens, str(obj.get("source", "")), response_format=fmt,
                    tools=tools, tool_choice=choice)


def _tools(obj: dict, where: str) -> tuple[tuple[dict, ...], Any, dict | None]:
    """(tools, tool_choice, response_format) of a workload object: a forcing
    ``tool_choice`` becomes the response_format its call must follow."""
    tools, choice, fmt = obj.get("tools", []), obj.get("tool_choice"), obj.get("response_format")
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function", {}).get("name"), str) for t in tools):
        raise ValueError(f"{where}: 'tools' must be a list of OpenAI function tools "
                         '({"type": "function", "function": {"name": ...}})')
    if choice is None:
        return tuple(tools), None, fmt
    names = {t["function"]["name"] for t in tools}
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not (choice == "required" and tools or named in names):
        raise ValueError(f"{where}: 'tool_choice' must be \"required\" or name one of the "
                         f"tools {sorted(names)}")
    if fmt is not None:
        raise ValueError(f"{where}: give 'response_format' or a forcing 'tool_choice', not both")
    schema = forced_call_schema(tools, choice)
    if schema is None:  # "required" or a named tool, as checked above, always force a call
        raise ValueError(f"{where}: this 'tool_choice' forces no call: use \"required\" or name a tool")
    return tuple(tools), choice, forced_response_format(schema)


def load_workloads(path: str | Path) -> list[Workload]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--workload {path} does not exist")
    out: list[Workload] = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
        out.append(parse_workload(obj, f"{path}:{i}", line=i))
    if not out:
        raise ValueError(f"{path} holds no workloads")
    names = [w.name for w in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{path}: workload names must be unique (a line without a name "
                         f"is named <class>-<line>); repeated: {dup}")
    return out


def write_workloads(workloads: Sequence[Workload], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(w.to_json()) + "\n" for w in workloads))


def _doc(module: str) -> str:
    return inspect.getdoc(importlib.import_module(module)) or ""


def _code(module: str, name: str, instruction: str) -> str:
    return (f"Here is Python code:\n\n```python\n{source_of(module, name)}```\n\n"
            f"{instruction} Reply with the complete updated code.")


def builtin_workloads() -> list[Workload]:
    """One or two workloads per class, from text found on this machine (docs/bench.md#workloads)."""
    recs = json_records(8)
    records = json.dumps(recs, indent=2)
    zen = zen_text()
    return [
        Workload("code_rename", "code_edit", _code("colorsys", "rgb_to_hls",
                 "Rename the function rgb_to_hls to rgb_to_hls_color and the variable "
                 "'sumc' to 'channel_sum'."), source=STDLIB),
        Workload("code_hints", "code_edit", _code("textwrap", "dedent",
                 "Add type hints to the function."), source=STDLIB),
        Workload("code_signature", "code_edit", _code("statistics", "median_low",
                 "Change the signature to median_low(data, *, default=None) and return "
                 "default when data is empty."), source=STDLIB),
        Workload("passage_json", "passage", f"Documentation:\n\n{_doc('json')}\n\n"
                 "Quote, word for word, the example that shows how to decode JSON.",
                 source=STDLIB),
        Workload("passage_statistics", "passage", f"Documentation:\n\n{_doc('statistics')}\n\n"
                 "Quote the lines of the documentation that show how to compute the "
                 "median and the mode.", source=STDLIB),
        Workload("json_lookup", "json_rag", f"Package records:\n\n{records}\n\n"
                 f"Return the records of {recs[1]['name']} and {recs[4]['name']} exactly "
                 "as JSON.", source="metadata of the Python packages installed on this machine"),
        Workload("json_add", "json_rag", f"Package records:\n\n{records}\n\n"
                 "Return the whole list as JSON with one more record like these for a "
                 "package named 'specdec'.",
                 source="metadata of the Python packages installed on this machine"),
        Workload("json_extract", "structured", f"Package records:\n\n{records}\n\n"
                 f"Return the record of {recs[2]['name']} as JSON: its name, version and summary.",
                 source="metadata of the Python packages installed on this machine",
                 response_format=RECORD_FORMAT),
        Workload("multiturn_short", "multi_turn_edit", _code("colorsys", "rgb_to_yiq",
                 "Rename the function to rgb_to_yiq_color."),
                 turns=("Now add type hints.", "Now add a one-line docstring."), source=STDLIB),
        Workload("multiturn_long", "multi_turn_edit", _code("shlex", "split",
                 "Rename the argument 's' to 'text'."),
                 turns=("Now add type hints.", "Now add a docstring with an example.",
                        "Now rename 'lex' to 'lexer'.", "Now make 'posix' keyword-only."),
                 source=STDLIB),
        Workload("summarize_csv", "summarization", f"Documentation:\n\n{_doc('csv')}\n\n"
                 "Summarize this in three bullet points, quoting the key sentence of each.",
                 source=STDLIB),
        Workload("summarize_zen", "summarization", f"The Zen of Python:\n\n{zen}\n\n"
                 "Summarize it in five bullet points, each quoting one line.", source=STDLIB),
        *(_agent(task) for task in ("write_file", "update_record")),
        Workload("open_story", "open_ended",
                 "Write a short story about a lighthouse keeper who finds a map."),
        Workload("open_arith", "open_ended",
                 "What is 37 times 48, then divided by 4? Work it out step by step."),
    ]


def _agent(task: str) -> Workload:
    messages, tools = agent_transcript(task)
    return parse_workload({"name": f"agent_{task}", "class": "agent", "messages": messages,
                           "tools": tools, "tool_choice": {"type": "function", "function": {
                               "name": task}}, "source": f"{STDLIB} and package metadata"})


def filler_text() -> str:
    """Unrelated real prose used to pad prompts (stdlib module documentation)."""
    mods = ("unittest", "doctest", "heapq", "sched", "itertools", "tokenize", "timeit",
            "uuid", "trace", "argparse")
    return "\n\n".join(_doc(m) for m in mods)


def split_instruction(text: str) -> tuple[str, str]:
    """(material, instruction): the instruction is the text after the last blank line.

    >>> split_instruction("Doc:\\n\\nsome text\\n\\nQuote it.")
    ('Doc:\\n\\nsome text', 'Quote it.')
    """
    head, sep, tail = text.rstrip().rpartition("\n\n")
    return (head, tail) if sep else ("", text)


def _with_first_text(w: Workload, text: str) -> Workload:
    if w.prompt is not None:
        return replace(w, prompt=text)
    msgs = [dict(m) for m in w.chat()]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    msgs[last_user]["content"] = text
    return replace(w, messages=tuple(msgs))


def _first_text(w: Workload) -> str:
    if w.prompt is not None:
        return w.prompt
    return [m for m in w.chat() if m["role"] == "user"][-1]["content"]


def fit_prompt(tokenizer: Any, w: Workload, n_tokens: int, filler: str | None = None) -> Workload:
    """``w`` with its first user text cut or padded to ``n_tokens`` prompt tokens (±2
    after re-tokenisation); docs/bench.md#workloads. The result records ``prompt_tokens``."""
    material, instruction = split_instruction(_first_text(w))

    def build(ids: list[int]) -> tuple[Workload, int]:
        body = tokenizer.decode(ids)
        fitted = _with_first_text(w, f"{body}\n\n{instruction}" if body else instruction)
        return fitted, len(fitted.encode(tokenizer))

    ids = list(tokenizer.encode(material, add_special_tokens=False))
    pad = list(tokenizer.encode((filler or filler_text()) + "\n\n", add_special_tokens=False))
    fitted, count = build(ids)
    for _ in range(4):  # re-tokenising at the cut shifts the count by a token or two
        delta = n_tokens - count
        if abs(delta) <= 2:
            break
        if delta < 0:
            if -delta >= len(ids):
                raise ValueError(f"workload {w.name}: its instruction alone takes "
                                 f"{count - len(ids)} tokens; ask for more than {n_tokens}")
            ids = ids[:delta]
        else:
            if delta > len(pad):
                raise ValueError(f"workload {w.name}: cannot pad to {n_tokens} tokens "
                                 f"(filler has {len(pad)}); ask for fewer")
            ids, pad = pad[-delta:] + ids, pad[:-delta]
        fitted, count = build(ids)
    return replace(fitted, name=w.name, prompt_tokens=count)
