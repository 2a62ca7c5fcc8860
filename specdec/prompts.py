"""Real, echo-heavy prompts built at run time from text this project did not write.

Contract: every builder uses only material installed on any Python machine (standard-library
sources, installed package metadata) plus an instruction whose answer quotes it; nothing is
downloaded. ``demo_prompt``, ``code_edit_prompt``, ``json_prompt``, ``passage_prompt``,
``parity_prompts``, ``short_questions``, ``agent_transcript``.
Tests: tests/test_prompts.py, used by tests/parity/test_parity_real.py,
tests/drafters/test_suffix.py and others. Details:
docs/loading.md#built-in-prompts."""

from __future__ import annotations

import ast
import codecs
import functools
import importlib
import importlib.util
import inspect
import json
from importlib import metadata


def source_of(module: str, name: str | None = None) -> str:
    mod = importlib.import_module(module)
    return inspect.getsource(getattr(mod, name) if name else mod)


def demo_prompt() -> str:
    src = source_of("colorsys")
    body = src[src.index("def rgb_to_hsv") :]
    return (
        "Here is a Python module:\n\n```python\n" + body + "```\n\n"
        "Rename the function rgb_to_hsv to rgb_to_hsv_color and hsv_to_rgb to "
        "hsv_to_rgb_color. Reply with the complete updated code only."
    )


def code_edit_prompt(module: str, func: str, instruction: str) -> str:
    return (
        f"```python\n{source_of(module, func)}```\n\n{instruction} "
        "Reply with the complete updated code."
    )


@functools.cache
def _installed_records() -> tuple[tuple[str, str, str], ...]:
    """(name, version, summary) of every installed distribution with both, sorted by name.
    Read once per process: parsing ~300 METADATA files costs ~0.17 s, and the parity prompts
    read it three times per build."""
    recs = []
    for dist in sorted(metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        md = dist.metadata
        if md["Name"] and md["Summary"]:
            recs.append((md["Name"], dist.version, md["Summary"][:80]))
    return tuple(recs)


def json_records(n: int = 4) -> list[dict]:
    """Real records: metadata of the first ``n`` installed distributions (sorted for
    determinism)."""
    return [{"name": name, "version": version, "summary": summary}
            for name, version, summary in _installed_records()[:n]]


def json_prompt(n: int = 4) -> str:
    recs = json_records(n)
    return (
        "Package records:\n" + json.dumps(recs, indent=2) + "\n\n"
        f"Return these records as a JSON list again, adding a field \"rank\" to each "
        f"(1 for {recs[0]['name']}, 2 for the next, and so on)."
    )


def passage_prompt(module: str, question: str) -> str:
    doc = inspect.getdoc(importlib.import_module(module)) or ""
    return f"Documentation:\n{doc[:1500]}\n\nQuote the sentences that answer: {question}"


def parity_prompts() -> dict[str, str]:
    """Named text prompts of every class the parity tests sweep."""
    return {
        "demo_colorsys": demo_prompt(),
        "code_statistics_hints": code_edit_prompt("statistics", "median", "Add type hints."),
        "code_textwrap_doc": code_edit_prompt(
            "textwrap", "dedent", "Add a one-line comment above every line."
        ),
        "code_fnmatch_rename": code_edit_prompt(
            "fnmatch", "filter", "Rename the variable 'result' to 'matches'."
        ),
        "code_shlex_quote": code_edit_prompt("shlex", "quote", "Add a docstring example."),
        "code_colorsys_hls": code_edit_prompt("colorsys", "rgb_to_hls", "Add type hints."),
        "code_fnmatch_translate": code_edit_prompt(
            "fnmatch", "fnmatchcase", "Rename the argument 'pat' to 'pattern'."
        ),
        "json_records": json_prompt(4),
        "json_add_record": "Package records:\n"
        + json.dumps(json_records(3), indent=2)
        + "\n\nAdd one more record in the same format for a package named 'specdec'.",
        "json_records_short": json_prompt(2),
        "passage_json": passage_prompt("json", "what does json expose?"),
        "passage_argparse": passage_prompt("argparse", "what does the module make easy?"),
        "passage_string": passage_prompt("string", "which constants are defined?"),
        "passage_textwrap": passage_prompt("textwrap", "what is the module for?"),
        "passage_zen": "The Zen of Python:\n"
        + zen_text()
        + "\nRepeat the lines about namespaces and errors.",
        "repetitive_counting": "1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3,",
        "repetitive_words": "red green blue " * 20,
        "open_story": "Write a short story about a lighthouse keeper.",
        "open_arith": "What is 17 times 23? Explain step by step.",
    }


QUESTION_FORMS = (
    "What is Python's {} module for? Answer in a short paragraph.",
    "Explain to a beginner how to use the {} module, with an example.",
    "Write a short story about a programmer who learns the {} module.",
    "List three mistakes people often make with Python's {} module.",
)
QUESTION_MODULES = ("argparse", "asyncio", "collections", "csv", "datetime", "functools",
                    "heapq", "itertools", "json", "logging", "pathlib", "random", "re",
                    "sqlite3", "statistics", "threading")


def short_questions(n: int = 64) -> list[str]:
    """``n`` distinct short questions (each form about each module; at most 64), in an
    order where consecutive questions differ in both.

    >>> short_questions(2)
    ["What is Python's argparse module for? Answer in a short paragraph.", 'Explain to a beginner how to use the asyncio module, with an example.']
    """
    pairs = [(i % len(QUESTION_FORMS), (i + i // len(QUESTION_MODULES)) % len(QUESTION_MODULES))
             for i in range(len(QUESTION_FORMS) * len(QUESTION_MODULES))]
    if not 0 < n <= len(pairs):
        raise ValueError(f"short_questions: n must be in 1..{len(pairs)}, got {n}")
    return [QUESTION_FORMS[f].format(QUESTION_MODULES[m]) for f, m in pairs[:n]]


def zen_text() -> str:
    """The Zen of Python, read from the ``this`` module's source (importing it prints)."""
    spec = importlib.util.find_spec("this")
    if spec is None or spec.origin is None:
        raise RuntimeError("the standard library's 'this' module is missing")
    with open(spec.origin) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "s" \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return codecs.decode(node.value.value, "rot13")
    raise RuntimeError("the 'this' module has no Zen text")


def _function(fn: str, description: str, **props: str) -> dict:
    return {"type": "function", "function": {
        "name": fn, "description": description,
        "parameters": {"type": "object", "properties": {
            k: {"type": "string", "description": v} for k, v in props.items()},
            "required": list(props), "additionalProperties": False}}}


AGENT_TOOLS = {
    "read_file": _function("read_file", "Read a text file", path="the file's path"),
    "write_file": _function("write_file", "Write the complete new contents of a file",
                            path="the file's path", content="the complete file"),
    "get_record": _function("get_record", "Fetch a package record", name="the package"),
    "update_record": _function("update_record", "Store a package record",
                               name="the package", version="its version",
                               summary="its summary"),
}


def agent_transcript(task: str) -> tuple[list[dict], list[dict]]:
    """(messages, tools) of an agent loop whose next reply is a ``task`` call (see doc)."""
    if task == "write_file":
        ask = ("Rename the function dedent in dedent.py to remove_indent. Read the file, "
               "then write back the complete updated file.")
        call, args, result = "read_file", {"path": "dedent.py"}, {"content": source_of("textwrap", "dedent")}
        tools = ["read_file", "write_file"]
    elif task == "update_record":
        rec = json_records(6)[5]
        ask = (f"Bump the version of the {rec['name']} record to 99.0 and store it, keeping "
               "the rest of it as it is.")
        call, args, result = "get_record", {"name": rec["name"]}, rec
        tools = ["get_record", "update_record"]
    else:
        raise ValueError(f"unknown agent task {task!r}: write_file or update_record")
    messages: list[dict] = [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": call, "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)}]
    return messages, [AGENT_TOOLS[t] for t in tools]
