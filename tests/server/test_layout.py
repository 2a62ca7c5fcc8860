"""The server's layout, checked rather than stated (issue #45 item 3): every module of
``specdec/server`` is at most ``MAX_LINES`` long, and a wire (``server/wires``) imports from
the engine only its request value and event types at run time (the ``Api`` handle it is
given is named for typing only). Reads the sources with ``ast``; imports nothing of specdec."""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "specdec" / "server"
MAX_LINES = 300
WIRE_MAY_IMPORT = {"spec", "events"}  # the engine's request value (its package) and its events


def engine_imports(source: str) -> set[str]:
    """The engine modules ``source`` (a module of server/wires) imports at run time, however
    spelled: ``from ..engine.x import``, ``from ..engine import x``, or through ``specdec``."""
    tree = ast.parse(source)
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                   for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0:
                module = module.removeprefix("specdec.server.") if module.startswith(
                    "specdec.server.engine") else ""
            elif node.level != 2:
                continue
            if module == "engine":
                found |= {alias.name for alias in node.names}
            elif module.startswith("engine."):
                found.add(module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[3] for a in node.names
                      if a.name.startswith("specdec.server.engine.")}
    return found


def test_no_server_module_is_over_the_limit():
    long = {str(p.relative_to(SERVER)): n for p in SERVER.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by concern (at most {MAX_LINES} lines)"


def test_wires_import_only_the_request_value_and_events_from_the_engine():
    found = {p.name: engine_imports(p.read_text()) for p in (SERVER / "wires").glob("*.py")}
    assert {name: mods - WIRE_MAY_IMPORT for name, mods in found.items() if mods - WIRE_MAY_IMPORT} == {}
    assert set().union(*found.values()) == WIRE_MAY_IMPORT  # the check reads the imports


def test_the_check_catches_a_wire_reaching_into_the_engine():
    src = ("from typing import TYPE_CHECKING\nfrom ..engine.worker import W\n"
           "from ..engine import batcher\nfrom specdec.server.engine.api import Api\n"
           "import specdec.server.engine.rows\nfrom ..http.errors import APIError\n"
           "if TYPE_CHECKING:\n    from ..engine.run import Run\n")
    assert engine_imports(src) == {"worker", "batcher", "api", "rows"}


# issue #45's walk (docs/server.md#one-request-value-max_tokens-from-an-anthropic-body-to-the-loop):
# between admission and the loop, the modules that read a request's ``max_tokens`` (an
# attribute ``.max_tokens``), by package. The loop (decode/loop, pipeline, step, batch) reads
# only ``Row.depth``; ``api``, ``worker`` and ``batcher`` carry nothing of it.
SPECDEC = SERVER.parent
READS_MAX_TOKENS = {
    "server/engine": {"admission.py",  # fitted to the room once -> Generation.max_tokens
                      "events.py",  # GenRequest.reserved: the KV budget's reservation
                      "wedlm_rows.py"},  # --decoder wedlm's windows (not the loop)
    "decode": {"generation.py",  # the value's own check (>= 1)
               "request.py"},  # Request.left: feed ends the output there; Row.depth reads it
}


def reads_max_tokens(source: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "max_tokens" for n in ast.walk(ast.parse(source)))


def test_between_admission_and_the_loop_only_the_walk_reads_max_tokens():
    found = {pkg: {p.name for p in (SPECDEC / pkg).glob("*.py") if reads_max_tokens(p.read_text())}
             for pkg in READS_MAX_TOKENS}
    assert found == READS_MAX_TOKENS
    assert reads_max_tokens("req.gen.max_tokens") and not reads_max_tokens('"max_tokens"')


def test_the_api_handle_never_takes_the_request_value():
    """Every wire hands its ``ChatSpec`` to ``Api.queue``, which ``admission`` defines: the
    event-stream half (``api.py``) neither imports nor names it."""
    source = (SERVER / "engine" / "api.py").read_text()
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    assert "ChatSpec" not in names and "spec" not in names
