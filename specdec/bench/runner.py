"""The measurement loop: every case × (1 warm-up + N runs) × every config, interleaved.

Contract: ``run_plan(plan)`` loads the model once, measures its verify cost curve, then
for each case (a workload fitted to one prompt length) runs repetition 0 (the warm-up,
kept but marked; ``warmup=False`` skips it) and repetitions 1..N; within a repetition every config — plain decoding
first, then ours, then each available peer's baseline and its speculative run at each
k of ``plan.peer_k`` — runs once, so slow drift of a shared machine hits every config
alike. Each run returns one ``RunRecord`` per turn (a multi-turn workload feeds the
model's own reply back before the next user turn, with one drafter for the whole
conversation, as a chat user would). Peers run the first turn only. Nothing is averaged
here: ``analysis`` does that. With a ``journal.Journal`` each finished case is appended to
it and a resumed run replays the cases it holds, with its cost curve.
Tests: tests/bench/test_runner.py, tests/bench/test_workloads.py, tests/bench/test_journal.py.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any, Callable, Mapping, Sequence, cast

import mlx.core as mx
import mlx.nn as nn

from ..cache.recurrent import refuse_trees
from ..cache.rollback import make_cache
from ..core.model import Model
from ..decode import trace
from ..drafters.base import Drafter
from ..drafters.spec import DraftResources
from ..eagle.io import load_head
from ..eagle.mtp import load_for
from ..policy.drafting import DecodePolicy
from ..policy.learnt import LearntCurves
from ..engine import GenerationResult, generate
from ..loader import load
from ..distributed import LeaderModel
from ..measure import cost_curve_for, draft_cost_for, verify_cost_curve
from ..parity import diagnose
from ..toolcall.prompt import renders_tools
from .analysis import ORACLE_PREFIX, parity
from .configs import BenchConfig
from .journal import CaseLine, Journal, fingerprint
from .oracle import OracleDrafter, replay_bound
from .peers import PeerCrashed, PeerUnavailable, make_peer
from .workloads import Workload, fit_prompt

PLAIN = BenchConfig()
TREE_LENGTHS = (24, 32, 48, 64)  # sparse longer blocks: the cost of token trees


@dataclass
class RunRecord:
    model: str
    workload: str
    cls: str
    length: int | None  # the requested prompt length (None: as written)
    prompt_tokens: int
    config: str  # a config label, or "<peer>: plain" / "<peer>: <method>"
    source: str  # "specdec" or the peer's name
    run: int  # 0 is the warm-up
    turn: int
    k: int
    tokens: list[int]
    prefill_s: float
    decode_s: float
    generated: int
    drafted: int = 0
    emitted: int = 0  # generated + the EOS that ended the turn, if one did (tokens per forward)
    accepted: int = 0
    verify_steps: int = 0
    fed_tokens: int = 0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (block length, accepted)
    accepted_by: dict[str, int] = field(default_factory=dict)  # a chain's members' accepted tokens

    @property
    def decode_tokens_per_s(self) -> float:
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "decode_tokens_per_s": self.decode_tokens_per_s}


@dataclass
class BenchPlan:
    model: str
    workloads: Sequence[Workload]
    configs: Sequence[BenchConfig]  # plain decoding is always added first
    prompt_tokens: Sequence[int | None] = (None,)
    runs: int = 3
    max_tokens: int = 128
    peers: Sequence[str] = ()
    peer_k: tuple[int, ...] = (4,)  # each peer's speculative run goes once per k
    draft_model: str | None = None
    dtype: str = "auto"
    warm_table: str | None = None  # a saved ngram-mod table that 'warm' configs load
    oracle: bool = True  # run the oracle drafter at each config's k, and the replay bounds
    warmup: bool = True  # repetition 0 of every case; off, the cost-curve and drafter-cost
    # measurements (which run the target and the draft model first) are the only warm-up
    distributed: int = 0  # the target is sharded over a group of this size (0: one process)

    def __post_init__(self) -> None:
        ks = (self.peer_k,) if isinstance(self.peer_k, int) else tuple(self.peer_k)
        if not ks or any(not isinstance(k, int) or k < 1 for k in ks) or len(set(ks)) != len(ks):
            raise ValueError(f"peer_k must be distinct integers >= 1 (e.g. (2, 4, 8)), got {self.peer_k!r}")
        self.peer_k = ks


@dataclass
class BenchResult:
    plan: dict
    meta: dict
    cost_curve: dict[int, float]
    records: list[RunRecord]
    peer_notes: dict[str, str]
    diagnoses: list[dict] = field(default_factory=list)  # one per config/case/turn that diverged
    bounds: list[dict] = field(default_factory=list)  # oracle.replay_bound per case/turn/k
    draft_costs: dict[str, dict] = field(default_factory=dict)  # config -> measure.draft_cost_for
    cases: dict[str, Any] = field(default_factory=dict)  # case key -> per-turn prompts (not saved)
    unfinished: int = 0  # cases of the plan not measured yet (a journal stopped the run early)


def _record(plan: BenchPlan, case: Workload, length: int | None, label: str, source: str,
            run: int, turn: int, k: int, res: GenerationResult) -> RunRecord:
    s = res.stats
    return RunRecord(plan.model, case.name, case.cls, length, s.prompt_tokens, label, source,
                     run, turn, k, list(res.tokens), s.prefill_s, s.decode_s,
                     s.generated_tokens, s.drafted, s.emitted_tokens, s.accepted, s.verify_steps,
                     s.fed_tokens,
                     list(s.drafted_by_position), list(s.accepted_by_position),
                     [(int(n), int(a)) for n, a in res.steps])


def conversation(model: Model, tok: Any, case: Workload, drafter: Drafter | DecodePolicy | None,
                 k: int, max_tokens: int, tree: int | str = 0) -> list[tuple[Any, GenerationResult]]:
    """Run every turn of ``case`` with one drafter: [(prompt of the turn, result)]."""
    prompt: Any = case.first_messages()
    out = []
    for turn in range(len(case.turns) + 1):
        res = generate(model, tok, case.encode(tok, prompt), drafter=drafter, max_tokens=max_tokens,
                       num_draft_tokens=k, draft_tree_budget=tree,
                       response_format=case.response_format)
        out.append((prompt, res))
        if turn == len(case.turns):
            break
        if getattr(tok, "chat_template", None) is None:  # a base model: continue the text
            prompt = f"{prompt}{res.text}\n\n{case.turns[turn]}\n\n"
        else:
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            prompt = [*msgs, {"role": "assistant", "content": res.text},
                      {"role": "user", "content": case.turns[turn]}]
    return out


def _machine() -> dict:
    versions = {}
    for pkg in ("mlx", "mlx-lm", "transformers", "torch", "llama_cpp_python"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return dict(platform=platform.platform(), machine=platform.machine(),
                cpus=os.cpu_count(), python=sys.version.split()[0], device=str(mx.default_device()),
                versions=versions, date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                argv=" ".join(sys.argv))


def _load_peers(plan: BenchPlan, loaded: dict[str, tuple[Any, Any]],
                draft_model: str | None) -> tuple[list[Any], dict[str, str]]:
    peers: list[Any] = []
    notes: dict[str, str] = {}
    if not plan.peers:
        return peers, notes

    for name in plan.peers:
        try:
            peers.append(make_peer(name, plan.model, draft_model, loaded))
        except PeerCrashed as e:  # its process died: that peer's failure, the bench goes on
            notes[name] = f"failed: {e}"
        except PeerUnavailable as e:
            notes[name] = f"skipped: {e}"
    return peers, notes


def _peer_runs(plan: BenchPlan, peer: Any, case: Workload, length: int | None, ids: list[int],
               run: int, notes: dict[str, str]) -> list[RunRecord]:
    """The peer's plain run once, then its speculative run once per k of ``plan.peer_k``."""
    def spec(k: int) -> tuple[str, int, Callable[[], Any]]:
        return (f"{peer.name}: {peer.method} k={k}", k,
                lambda: peer.speculative(ids, plan.max_tokens, k))

    out = []
    # the plain record keeps the first k, as a single-k plan always recorded it
    jobs = [(f"{peer.name}: plain", plan.peer_k[0], lambda: peer.baseline(ids, plan.max_tokens)),
            *map(spec, plan.peer_k)]
    for label, k, fn in jobs:
        if notes.get(label):
            continue
        try:
            r = fn()
        except PeerCrashed as e:
            notes[label] = f"failed: {e}"
            continue
        except PeerUnavailable as e:
            notes[label] = f"skipped: {e}"
            continue
        # A peer's clock starts at its first token, ours at the end of prefill (whose
        # first decode forward makes the first token): count the tokens after the
        # first for a peer, so both rates are tokens per second of decoding forwards.
        out.append(RunRecord(plan.model, case.name, case.cls, length, len(ids), label,
                             peer.name, run, 0, k, list(r.tokens), r.prefill_s,
                             r.decode_s, max(len(r.tokens) - 1, 0)))
    return out


def _cost_curve(plan: BenchPlan, model: Model) -> dict[int, float]:
    """The verify cost curve at L = 1 .. the largest k + 1 (the long blocks only when a config
    drafts token trees): the one a CLI run or a server prices on, cached per model, dtype and
    machine (``measure.cost_curve_for``: floors, so a loaded machine prices as a quiet one)."""
    k_max = max([c.k for c in plan.configs] + list(plan.peer_k))
    trees = TREE_LENGTHS if any(c.tree_budget for c in plan.configs) else ()
    if isinstance(model, LeaderModel):  # a sharded forward: never under the model's own key
        return verify_cost_curve(model, k_max + 1, extra=trees)
    curve = cost_curve_for(model, k_max + 1, extra=trees)
    return {L: curve[L] for L in sorted({*range(1, k_max + 2), *trees})}


@dataclass
class _Setup:
    """What every case of a run measures with: the loaded models, the cost curve, peers."""

    model: Model
    tok: Any
    cost: dict[int, float]
    draft: Any
    heads: DraftResources | None
    peers: list[Any]
    oracle_ks: list[int]
    # each config's (by label) gate memory, carried across cases; never shared: chains count as "suffix" too
    learnt: dict[str, LearntCurves] = field(default_factory=dict)


def run_plan(plan: BenchPlan, progress: Callable[[str], None] | None = None,
             target: tuple[Any, Any] | None = None, journal: Journal | None = None) -> BenchResult:
    """Run ``plan``; ``target`` is the (model, tokenizer) to measure when the caller
    loaded it (rank 0's ``LeaderModel`` under ``--distributed``), else it is loaded here.
    With a ``journal`` each finished case is appended to it, the cases it holds are not
    measured again, and it may stop the run early (``BenchResult.unfinished``)."""
    if plan.runs < 1:
        raise ValueError("--runs must be >= 1")
    model, tok = target or load(plan.model, dtype=plan.dtype)
    _refuse_trees(plan, model)
    heads = load_heads(plan, model)
    draft = None
    if any(c.spec.uses("model") for c in plan.configs):
        if not plan.draft_model:
            raise ValueError("a 'model' config needs --draft-model")
        draft = load(plan.draft_model, dtype=plan.dtype)
    cases, skipped = _cases(plan, tok)
    header = journal.header if journal is not None else None
    cost = header.cost_curve if header else _cost_curve(plan, model)
    loaded: dict[str, tuple[Any, Any]] = {plan.model: (model, tok)}
    if draft and plan.draft_model:
        loaded[plan.draft_model] = draft
    peers, notes = _load_peers(plan, loaded, draft_model=None if heads else plan.draft_model)
    result = BenchResult(asdict_plan(plan), header.meta if header else _machine(), cost, [], notes | skipped)
    # each drafter's own cost per proposal: counted by adaptive k and tree=auto, and by
    # the report's drafter-cost bound (measured once per drafter and model pair, cached)
    result.draft_costs = header.draft_costs if header else _draft_costs(plan, model, draft, heads)
    if journal is not None and header is None:
        journal.start(result.meta, cost, result.draft_costs)
    setup = _Setup(model, tok, cost, draft, heads, peers,
                   sorted({c.k for c in plan.configs}) if plan.oracle else [])
    measured = 0
    for case, length in cases:
        key = f"{case.name}|{length}"
        if journal is not None and key in journal.done:
            _replay(journal.done[key], result)
        elif journal is not None and journal.stops(measured):
            result.unfinished += 1
        else:
            start = len(result.records), len(result.bounds)
            _run_case(plan, setup, case, length, result, progress)
            measured += 1
            if journal is not None:
                journal.append(_case_line(key, result, *start))
    for peer in peers:
        peer.close()
    result.diagnoses = _diagnose(model, tok, plan, result, cost, draft, heads)
    return result


def _run_case(plan: BenchPlan, s: _Setup, case: Workload, length: int | None, result: BenchResult,
              progress: Callable[[str], None] | None) -> None:
    """Every repetition of one case, every config interleaved within each (plain first,
    then ours, the oracle, the peers); the records go into ``result``."""
    ids = case.encode(s.tok)
    for run in range(0 if plan.warmup else 1, plan.runs + 1):
        plain_turns: list[list[int]] = []
        for cfg in [PLAIN, *plan.configs]:
            drafter = cfg.drafter(s.tok, cost=s.cost, draft=s.draft, table=plan.warm_table,
                                  draft_cost=result.draft_costs.get(cfg.label), heads=s.heads,
                                  learnt=s.learnt.setdefault(cfg.label, LearntCurves()))
            turns = _measure(plan, s.model, s.tok, case, length, cfg.label, run, cfg.k, drafter,
                             result, cfg.tree_budget)
            if cfg.baseline:
                plain_turns = [list(res.tokens) for _, res in turns]
                if run == 1:
                    for t, (prompt, _) in enumerate(turns):
                        result.cases[f"{case.name}|{length}|{t}"] = prompt
                    result.bounds += _bounds(s.tok, case, length, turns, s.oracle_ks, s.cost)
            if progress:
                progress(f"{case.name}@{length or 'as written'} run {run} {cfg.label}")
        for k in s.oracle_ks:
            _measure(plan, s.model, s.tok, case, length, f"{ORACLE_PREFIX} k={k}", run, k,
                     OracleDrafter(plain_turns), result)
        if s.oracle_ks and progress:
            progress(f"{case.name}@{length or 'as written'} run {run} oracle")
        for peer in s.peers:  # peers cannot constrain: a schema's case is ours alone
            if case.response_format is None:
                result.records += _peer_runs(plan, peer, case, length, ids, run, result.peer_notes)
            if progress:
                progress(f"{case.name}@{length or 'as written'} run {run} {peer.name}")


def _case_line(key: str, result: BenchResult, records: int, bounds: int) -> CaseLine:
    """The journal line of the case just measured (its records from index ``records`` on)."""
    prompts = {k: v for k, v in result.cases.items() if k.startswith(f"{key}|")}
    return CaseLine(key, [asdict(r) for r in result.records[records:]], result.bounds[bounds:],
                    prompts, dict(result.peer_notes))


def _replay(line: CaseLine, result: BenchResult) -> None:
    """A case the journal holds, into ``result`` as if measured now."""
    for d in line.records:
        result.records.append(RunRecord(**{**d, "steps": [tuple(s) for s in d["steps"]]}))
    result.bounds += line.bounds
    result.cases.update(line.prompts)
    result.peer_notes.update(line.peer_notes)


def _draft_costs(plan: BenchPlan, model: Model, draft: Any,
                 heads: DraftResources | None) -> dict[str, dict]:
    """Each config's ``measure.draft_cost_for`` (a head or MTP block priced by its forwards)."""
    return {c.label: draft_cost_for(c.spec.draft_type, model, draft[0] if draft else None,
                                    head=heads.head if heads else None,
                                    mtp=heads.mtp if heads else None)
            for c in plan.configs}


def load_heads(plan: BenchPlan, model: Model) -> DraftResources | None:
    """The EAGLE-3 head (``--draft-model DIR``) and the MTP block (``--draft-model`` or the
    target's own checkpoint) the plan's eagle / mtp configs draft with, loaded once for every
    run; None when no config uses either. Refused: eagle or mtp beside a draft model (all read
    ``--draft-model``), eagle without a head directory."""
    eagle = [c.text for c in plan.configs if c.spec.uses("eagle")]
    mtp = [c.text for c in plan.configs if c.spec.uses("mtp")]
    if not eagle and not mtp:
        return None
    others = [c.text for c in plan.configs if c.spec.uses("model")] + (mtp if eagle else [])
    if others:
        raise ValueError(f"--draft-model names one thing: the eagle / mtp configs "
                         f"{', '.join(eagle or mtp)} cannot share a plan with {', '.join(others)}")
    if eagle and not plan.draft_model:
        raise ValueError(f"the configs {', '.join(eagle)} need --draft-model DIR (an EAGLE-3 head)")
    res = DraftResources(target=model)
    if eagle:  # the head shares the target's embeddings: it reads the loaded module's layers
        res.head = load_head(cast(str, plan.draft_model), target=cast(nn.Module, model))
    else:
        res.mtp = load_for(cast(nn.Module, model), plan.draft_model)
    return res


def _refuse_trees(plan: BenchPlan, model: Model) -> None:
    """Tree configs on a hybrid target, refused before any measurement (the engine's check):
    a tree step cannot roll back a recurrent state."""
    trees = [c.text for c in plan.configs if c.tree_budget]
    if trees:
        refuse_trees(make_cache(model, rollback=False), len(trees),
                     f"drop tree= from the configs {', '.join(trees)} (linear drafts)")


def _cases(plan: BenchPlan, tok: Any) -> tuple[list[tuple[Workload, int | None]], dict[str, str]]:
    """(workload fitted to a prompt length, that length) for each case, and skip notes."""
    workloads, skipped = _renderable(plan.workloads, tok, plan.model)
    cases = [(fit_prompt(tok, w, n) if n else w, n) for w in workloads if not w.tools
             for n in plan.prompt_tokens]
    cases += [(w, None) for w in workloads if w.tools]  # a transcript runs as written
    return cases, skipped


def _renderable(workloads: Sequence[Workload], tok: Any,
                model: str) -> tuple[list[Workload], dict[str, str]]:
    """The workloads this model's chat template can render, and a note for each other:
    an agent transcript needs a template that renders tools and tool messages."""
    if not any(w.tools for w in workloads) or renders_tools(tok):
        return list(workloads), {}
    skipped = {w.name: f"skipped: the chat template of {model} does not render tools"
               for w in workloads if w.tools}
    kept = [w for w in workloads if not w.tools]
    if not kept:
        raise ValueError(f"every workload is an agent transcript and the chat template of "
                         f"{model} does not render tools: use a model whose template does "
                         "(e.g. qwen2.5-coder-0.5b)")
    return kept, skipped


def _measure(plan: BenchPlan, model: Model, tok: Any, case: Workload, length: int | None,
             label: str, run: int, k: int, drafter: Drafter | DecodePolicy | None, result: BenchResult,
             tree: int | str = 0) -> list:
    """One run of every turn of ``case`` with ``drafter``; its records go into ``result``
    (the last one with a chain's accepted tokens per member over all turns)."""
    members = getattr(drafter, "stats", None)
    before = ({m: v["accepted"] for m, v in members.items()} if isinstance(members, dict)
              and all(isinstance(v, dict) for v in members.values()) else {})
    tracer = trace.active()  # --trace: each row says which config, case and run it was
    if tracer is not None:
        tracer.tag(config=label, case=case.name, length=length, run=run)
    turns = conversation(model, tok, case, drafter, k, case.max_tokens or plan.max_tokens,
                         tree=tree)
    for t, (_, res) in enumerate(turns):
        result.records.append(_record(plan, case, length, label, "specdec", run, t, k, res))
    members = getattr(drafter, "stats", None)  # a chain: which member's drafts were accepted
    if isinstance(members, dict) and all(isinstance(v, dict) for v in members.values()):
        result.records[-1].accepted_by = {m: v["accepted"] - before.get(m, 0)
                                          for m, v in members.items()}
    return turns


def _bounds(tok: Any, case: Workload, length: int | None, turns: list, ks: Sequence[int],
            cost: Mapping[int, float]) -> list[dict]:
    """The offline replay bounds of each turn's plain output at each k."""
    out = []
    for t, (prompt, res) in enumerate(turns):
        ids = case.encode(tok, prompt)
        for k in ks:
            out.append(dict(workload=case.name, length=length, turn=t, k=k,
                            **replay_bound(ids, list(res.tokens), k, cost)))
    return out


def _diagnose(model: Model, tok: Any, plan: BenchPlan, result: BenchResult, cost: Any,
              draft: Any, heads: DraftResources | None) -> list[dict]:
    """For each (case, turn, config) of ours whose tokens differed from plain decoding:
    the foundation's parity diagnosis (position, margins, verdict), re-run with
    diagnostics on that turn's prompt. A later turn is re-run with a fresh drafter, so
    memory carried from earlier turns is not reproduced: the verdict says so."""
    by_label = {c.label: c for c in plan.configs}
    max_tokens = {w.name: w.max_tokens or plan.max_tokens for w in plan.workloads}
    cases = {w.name: w for w in plan.workloads}
    out = []
    for row in parity([r.to_dict() for r in result.records]):
        if not row["mismatches"] or row["source"] != "specdec" or row["config"] not in by_label:
            continue
        cfg = by_label[row["config"]]
        case = cases[row["workload"]]
        prompt = case.encode(tok, result.cases[f"{row['workload']}|{row['length']}|{row['turn']}"])
        kw = dict(max_tokens=max_tokens[row["workload"]], num_draft_tokens=cfg.k, diagnostics=True,
                  response_format=case.response_format)
        plain = generate(model, tok, prompt, drafter=None, **kw)
        # the same drafter the measured run started with (a warm config's saved table too)
        drafter = cfg.drafter(tok, cost=cost, draft=draft, table=plan.warm_table, heads=heads)
        spec = generate(model, tok, prompt, drafter=drafter, draft_tree_budget=cfg.tree_budget, **kw)
        rep = diagnose(model, plain, spec, set(tok.eos_token_ids)).to_dict()
        if row["turn"]:
            rep["verdict"] += " (re-run of a later turn with a fresh drafter)"
        out.append({**row, **rep})
    return out


def total_steps(plan: BenchPlan, done: int = 0) -> int:
    """How many progress ticks ``run_plan`` makes (for a progress bar), ``done`` cases
    (a resumed run's) left out."""
    per_rep = 1 + len(plan.configs) + len(plan.peers) + (1 if plan.oracle else 0)
    reps = plan.runs + (1 if plan.warmup else 0)
    return max(len(plan.workloads) * len(plan.prompt_tokens) - done, 0) * reps * per_rep


def plan_identity(plan: BenchPlan, code: str) -> dict:
    """What a resumed run must share with the run it continues (``journal.Journal.open``):
    the plan, its dtype, the workloads' text and the code's commit."""
    return dict(plan={**asdict_plan(plan), "dtype": plan.dtype},
                workloads=fingerprint([asdict(w) for w in plan.workloads]), code=code)


def asdict_plan(plan: BenchPlan) -> dict:
    return dict(model=plan.model, workloads=[w.name for w in plan.workloads],
                configs=[c.text for c in plan.configs], prompt_tokens=list(plan.prompt_tokens),
                runs=plan.runs, max_tokens=plan.max_tokens, peers=list(plan.peers),
                peer_k=list(plan.peer_k), draft_model=plan.draft_model,
                warm_table=plan.warm_table, oracle=plan.oracle, warmup=plan.warmup,
                distributed=plan.distributed)
