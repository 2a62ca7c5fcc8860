"""A bench run's journal: ``records.jsonl`` beside ``results.json``, so a long run (the full
Spec-Bench profile, ~4 h here) can be stopped and resumed (``specdec bench --resume DIR``).

Contract: line 1 is the ``Header``: what the run is (``identity``: the plan, its workloads'
fingerprint, the code's commit), the machine and command of its first invocation, and what
it measured before any case (the verify cost curve and drafter costs, which the gate prices
with: a resumed run reuses them, so its drafters decide as the uninterrupted run's would).
Each later line is one finished case (``CaseLine``: its records, replay bounds, prompts and
the peer notes so far), appended and flushed as the case completes; a line torn by a kill
is dropped on reading. ``Journal.open`` refuses to resume a different run (naming the
settings that differ) and to start a run over a journal. Tests: tests/bench/test_journal.py,
tests/bench/test_specbench.py (a stopped run resumed gives the uninterrupted run's report).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

JOURNAL = "records.jsonl"


@dataclass(frozen=True)
class Header:
    identity: dict  # what must match to resume: plan, workloads' fingerprint, code
    meta: dict  # the machine and command of the first invocation
    cost_curve: dict[int, float]
    draft_costs: dict[str, dict]


@dataclass(frozen=True)
class CaseLine:
    case: str  # "<workload>|<prompt length>"
    records: list[dict]  # RunRecord fields
    bounds: list[dict]
    prompts: dict[str, Any]  # "<workload>|<length>|<turn>" -> that turn's prompt
    peer_notes: dict[str, str]


def code_version() -> str:
    """The commit of the specdec checkout (its version when not a git checkout)."""
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib import metadata

        return f"specdec {metadata.version('specdec')}"


def fingerprint(items: list[Any]) -> str:
    """A short hash of ``items`` (the workloads, as dicts): same questions, same text."""
    text = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Journal:
    """The journal of the run in ``out``: its header once measured, the cases done so far;
    ``max_cases`` (``--max-questions``): how many more cases this invocation measures."""

    def __init__(self, path: Path, identity: dict, header: Header | None,
                 done: dict[str, CaseLine], max_cases: int | None = None):
        self.path, self.identity, self.header, self.done = path, identity, header, done
        self.max_cases = max_cases

    @classmethod
    def open(cls, out: Path, identity: dict, resume: bool, max_cases: int | None = None) -> Journal:
        """A new journal in ``out``, or (``resume``) the one there, checked against ``identity``."""
        path = Path(out) / JOURNAL
        if max_cases is not None and max_cases < 0:
            raise ValueError(f"--max-questions must be >= 0, got {max_cases}")
        if not resume:
            if path.exists() and path.stat().st_size:
                raise ValueError(f"{out} already holds a bench run ({JOURNAL}): continue it with "
                                 f"--resume {out}, or give another --out")
            return cls(path, identity, None, {}, max_cases)
        if not path.exists() or not path.stat().st_size:
            raise ValueError(f"{out} holds no bench run to resume (no {JOURNAL}): start it "
                             f"without --resume (--out {out})")
        header, done = _read(path)
        if differs := _differences(header.identity, identity):
            raise ValueError(f"{out} holds a different run: {'; '.join(differs)}. Resume it with "
                             "the command that started it (the same flags and checkout), or give "
                             "a new --out")
        return cls(path, identity, header, done, max_cases)

    def start(self, meta: dict, cost_curve: dict[int, float], draft_costs: dict) -> Header:
        """Write the header of a new run (after its pre-case measurements)."""
        self.header = Header(self.identity, meta, dict(cost_curve), draft_costs)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self._append(asdict(self.header))
        return self.header

    def stops(self, measured: int) -> bool:
        """Whether this invocation has measured its ``max_cases``."""
        return self.max_cases is not None and measured >= self.max_cases

    def append(self, line: CaseLine) -> None:
        self.done[line.case] = line
        self._append(asdict(line))

    def _append(self, obj: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(obj) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _read(path: Path) -> tuple[Header, dict[str, CaseLine]]:
    """The header and the finished cases; a last line without its newline (the write a
    kill cut) is dropped, and cut from the file so the next append starts clean."""
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        path.write_text(text)
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path} has no complete header line: start the run again without --resume")
    h = lines[0]
    header = Header(h["identity"], h["meta"], {int(k): v for k, v in h["cost_curve"].items()},
                    h["draft_costs"])
    return header, {d["case"]: CaseLine(**d) for d in lines[1:]}


def _differences(stored: dict, asked: dict) -> list[str]:
    """The settings (plan fields, workloads, code) where ``asked`` differs from ``stored``."""
    out = []
    for key in sorted(set(stored) | set(asked)):
        a, b = stored.get(key), asked.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{d}" for d in _differences(a, b)]
        elif a != b:
            out.append(f"{key} was {_short(a)}, now {_short(b)}")
    return out


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
