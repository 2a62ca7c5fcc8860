"""Spec-Bench (github hemingkx/Spec-Bench, Apache-2.0) in the bench: its 480 questions as
workloads, a stratified quick subset, our figures per category and the leaderboard's
published ones beside them.

Contract: ``questions()`` reads the vendored ``data/specbench/question.jsonl`` (its README
names the source and license); ``category_of`` maps Spec-Bench's 13 ``category`` values to
the six of its leaderboard (MT-bench's eight sub-categories are one, ``mt_bench``);
``stratified(qs, n)`` keeps ``n`` questions per category, evenly spaced in file order (so
MT-bench's spread over its sub-categories); ``workloads(n)`` makes one ``Workload`` per
question, class = its category, the second MT-bench turn asked after the model's own first
answer (``runner.conversation``, as Spec-Bench's harness builds its second prompt).
``category_table(rows)`` aggregates the bench's per-case rows: per category and config the
geomean speedup and tokens per forward (Spec-Bench's "mean accepted tokens": every emitted
token, an ending EOS included, over the target forwards after prefill), overall the geomean
over every question. ``LEADERBOARD`` transcribes Leaderboard.md (A100, Vicuna-7B-v1.3, and
EAGLE-3's row on Vicuna-13B-v1.3: its only A100 figures).
Tests: tests/bench/test_specbench.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Iterable, Sequence

from . import analysis
from .workloads import Workload

# Spec-Bench's six categories, in its leaderboard's column order, with the column names
CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
TITLES = {"mt_bench": "Multi-turn Conversation", "translation": "Translation",
          "summarization": "Summarization", "qa": "Question Answering",
          "math_reasoning": "Mathematical Reasoning", "rag": "Retrieval-aug. Generation"}
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
            "humanities")
SOURCE = "Spec-Bench (github hemingkx/Spec-Bench, data/spec_bench/question.jsonl), Apache-2.0"
SLOW_BELOW = 0.97  # a question below this speedup over plain counts as a loss


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str  # one of CATEGORIES
    sub: str  # Spec-Bench's own category value (MT-bench's sub-category)
    turns: tuple[str, ...]


def category_of(value: str) -> str:
    """The leaderboard category of a question.jsonl ``category`` value.

    >>> category_of("roleplay"), category_of("rag")
    ('mt_bench', 'rag')
    """
    if value in MT_BENCH:
        return "mt_bench"
    if value in CATEGORIES:
        return value
    raise ValueError(f"unknown Spec-Bench category {value!r} (known: {', '.join(MT_BENCH + CATEGORIES)})")


def parse_question(obj: dict) -> Question:
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
        raise ValueError(f"Spec-Bench question {obj.get('question_id')!r}: 'turns' must be "
                         "a non-empty list of strings")
    return Question(int(obj["question_id"]), category_of(obj["category"]), obj["category"],
                    tuple(turns))


@lru_cache(maxsize=1)
def questions() -> tuple[Question, ...]:
    """The 480 vendored questions, in file order."""
    text = resources.files(__package__).joinpath("data/specbench/question.jsonl").read_text()
    return tuple(parse_question(json.loads(line)) for line in text.splitlines() if line.strip())


def stratified(qs: Sequence[Question], per_category: int) -> list[Question]:
    """``per_category`` questions of each category, evenly spaced in file order (the middle
    of each of ``per_category`` equal slices): deterministic, and spread over MT-bench's
    sub-categories. The order is category by category."""
    if per_category < 1:
        raise ValueError(f"questions per category must be >= 1, got {per_category}")
    out = []
    for cat in CATEGORIES:
        mine = [q for q in qs if q.category == cat]
        n = min(per_category, len(mine))
        out += [mine[(2 * i + 1) * len(mine) // (2 * n)] for i in range(n)]
    return out


def workload(q: Question) -> Workload:
    return Workload(f"{q.sub}-{q.question_id}", q.category, q.turns[0], turns=q.turns[1:],
                    source=SOURCE)


def workloads(per_category: int | None = None, ids: Iterable[int] | None = None) -> list[Workload]:
    """Every question as a workload (``per_category``: the stratified subset; ``ids``: only
    the questions of these ids, each of which must exist)."""
    qs = questions()
    if ids:
        wanted = set(ids)
        if unknown := sorted(wanted - {q.question_id for q in qs}):
            raise ValueError(f"no Spec-Bench question has the id(s) {unknown[:10]} (ids "
                             f"{qs[0].question_id}-{qs[-1].question_id})")
        qs = tuple(q for q in qs if q.question_id in wanted)
    return [workload(q) for q in (stratified(qs, per_category) if per_category else qs)]


@dataclass(frozen=True)
class LeaderRow:
    method: str
    model: str
    speedups: tuple[float, ...]  # per category, in CATEGORIES order
    mean_accepted: float  # the leaderboard's "#Mean Accepted Tokens"
    overall: float


DEVICE = "one NVIDIA A100 80GB, PyTorch 2.5.1, FP16, greedy, batch size 1"
_V7, _V13 = "Vicuna-7B-v1.3", "Vicuna-13B-v1.3"
LEADERBOARD = (  # Leaderboard.md, "Leaderboard on A100"
    LeaderRow("EAGLE-3", _V13, (3.48, 2.36, 3.14, 2.94, 3.42, 2.78), 5.71, 3.02),
    LeaderRow("SAMD[EAGLE-2]", _V7, (3.30, 2.01, 3.19, 2.36, 2.96, 2.52), 4.58, 2.73),
    LeaderRow("EAGLE-2", _V7, (2.84, 1.88, 2.34, 2.15, 2.79, 2.13), 4.34, 2.36),
    LeaderRow("Recycling", _V7, (2.37, 2.02, 2.27, 2.08, 2.53, 2.02), 2.73, 2.22),
    LeaderRow("EAGLE", _V7, (2.45, 1.77, 2.08, 1.93, 2.44, 1.87), 3.58, 2.10),
    LeaderRow("Hydra", _V7, (2.43, 1.89, 1.83, 1.97, 2.45, 1.80), 3.26, 2.07),
    LeaderRow("Medusa", _V7, (1.97, 1.65, 1.57, 1.65, 1.94, 1.49), 2.31, 1.71),
    LeaderRow("PLD", _V7, (1.60, 1.06, 2.66, 1.19, 1.62, 1.86), 1.75, 1.66),
    LeaderRow("SpS", _V7, (1.66, 1.13, 1.71, 1.50, 1.47, 1.66), 2.28, 1.52),
    LeaderRow("REST", _V7, (1.63, 1.31, 1.36, 1.66, 1.21, 1.73), 1.82, 1.48),
    LeaderRow("Lookahead", _V7, (1.47, 1.14, 1.36, 1.25, 1.57, 1.22), 1.64, 1.34),
)


@dataclass
class Cell:
    """One config on one category (or ``overall``): geomean speedup over its questions,
    tokens per forward over all their turns and runs, questions and how many lost."""

    questions: int
    speedup: float | None
    tpf: float | None
    slow: int  # questions below SLOW_BELOW × plain
    worst: float | None


def _cell(rows: Sequence[dict]) -> Cell:
    speeds = [r["speedup"] for r in rows if r["speedup"]]
    return Cell(len(rows), analysis.geomean(speeds), analysis.tokens_per_forward(rows),
                sum(s < SLOW_BELOW for s in speeds), min(speeds, default=None))


def category_table(rows: Iterable[dict]) -> dict[str, dict[str, dict]]:
    """config -> {category or "overall": a ``Cell`` as a dict} over the bench's per-case rows of ours
    (plain included: its tokens per forward is 1.0 by construction, a check)."""
    by: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        if r["source"] == "specdec" and r["cls"] in CATEGORIES \
                and not r["config"].startswith(analysis.ORACLE_PREFIX):
            cfg = by.setdefault(r["config"], {})
            cfg.setdefault(r["cls"], []).append(r)
            cfg.setdefault("overall", []).append(r)
    order = (*CATEGORIES, "overall")
    return {c: {k: asdict(_cell(cats[k])) for k in order if k in cats} for c, cats in by.items()}


def is_specbench(classes: Iterable[str]) -> bool:
    """Whether a plan's workloads are Spec-Bench questions (all of them)."""
    cls = set(classes)
    return bool(cls) and cls <= set(CATEGORIES)
