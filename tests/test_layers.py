"""The layer rule, checked rather than stated: core → cache → drafters → policy → decode →
measure → API → apps (server, bench, cli). A module may import from its own layer or a lower
one; the side units (backend, prompts, toolcall, loader, distributed) only what they list, and
only the API and the apps may import them. Reads each module's imports with ``ast`` (imports
inside functions and under ``TYPE_CHECKING`` count too); imports nothing of specdec."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "specdec"

# The main chain: each unit's rank. A unit is a subpackage or a top-level module of specdec.
RANK = {
    "core": 0, "cache": 1, "drafters": 2, "eagle": 2, "policy": 3, "decode": 4,
    "measure": 5, "measure_floor": 5, "calibrate": 5,
    "": 6, "engine": 6, "resources": 6, "parity": 6, "config": 6,  # "" is specdec/__init__
    "server": 7, "bench": 7, "cli": 7, "__main__": 7, "train_drafter": 7,
}
# Beside the chain: what each side unit may import (besides itself).
SIDE = {
    "backend": set(), "prompts": set(), "toolcall": set(),
    "loader": {"core", "backend"},
    "distributed": {"core", "cache", "loader", "backend"},
}
API = RANK["engine"]


def allowed(src: str, dst: str) -> bool:
    """Whether unit ``src`` may import unit ``dst``."""
    if src == dst:
        return True
    if src in SIDE:
        return dst in SIDE[src]
    if dst in SIDE:
        return RANK[src] >= API
    return RANK[dst] <= RANK[src]


def unit_of(module: str) -> str:
    """``specdec.cache.rollback`` -> ``cache``; ``specdec`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported(module: str, is_package: bool, source: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every specdec import in ``source``."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # ``from specdec import engine`` names the unit in the alias
            names = ([f"{name}.{a.name}" for a in node.names] if name == "specdec" else [name])
        else:
            continue
        found += [(node.lineno, n) for n in names if n == "specdec" or n.startswith("specdec.")]
    return found


def violations(module: str, is_package: bool, source: str) -> list[str]:
    src = unit_of(module)
    return [f"{module}:{line} imports {name} ({src or 'specdec'} -> {unit_of(name)})"
            for line, name in imported(module, is_package, source)
            if not allowed(src, unit_of(name))]


def modules() -> list[tuple[str, bool, Path]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        package = parts[-1] == "__init__"
        out.append((".".join(parts[:-1] if package else parts), package, path))
    return out


def test_every_unit_has_a_layer():
    units = {unit_of(m) for m, _, _ in modules()}
    assert units - RANK.keys() - SIDE.keys() == set(), "give the new unit a layer here"


def test_the_layer_rule_holds():
    bad = [v for m, pkg, path in modules() for v in violations(m, pkg, path.read_text())]
    assert bad == []


def test_the_check_catches_a_violation():
    # a lower layer importing a higher one, relative and absolute, at top level and inside
    # a function; a side unit importing the chain; the chain below the API importing a side unit
    assert violations("specdec.cache.fake", False, "from ..decode.step import verify_step")
    assert violations("specdec.core.fake", False, "def f():\n    import specdec.drafters.base")
    assert violations("specdec.policy.fake", False, "from specdec import measure")
    assert violations("specdec.toolcall.fake", False, "from ..engine import generate")
    assert violations("specdec.drafters.fake", False, "from ..loader import api")
    assert violations("specdec.decode", True, "from .. import server")
    # and lets the rule's own directions through
    assert not violations("specdec.decode.fake", False, "from ..core.verify import greedy_accept")
    assert not violations("specdec.server.fake", False, "from ..toolcall import formats")
    assert not violations("specdec.loader.fake", False, "from ..backend import device")
    assert not violations("specdec.cache.fake", False, "from . import rollback\nimport numpy")
