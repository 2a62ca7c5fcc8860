"""Cost measurements that decide whether speculation can pay: verify cost and draft cost.

Contract: ``verify_cost_curve`` -> {L: seconds} of one L-token forward (interleaved floors, rising;
a step emitting m tokens beats plain only if m > c(L)/c(1)); ``cost_curve_for`` caches it per
model fingerprint under ``$SPECDEC_CACHE_DIR/cost``; ``tree_overhead`` is a tree step over a
linear one, timed interleaved; ``resolve_tree_budget``, ``proposal_cost``, ``draft_cost_for``
({"fixed", "per_token"} seconds, cached).
Tests: tests/test_measure.py, tests/test_calibrate.py. Details: docs/gate.md#measuring-costs."""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx


from .cache.rollback import make_cache, prefill, trim
from .core.arrays import flat_weights
from .core.model import Model
from .core.proposal import Proposal
from .core.vocab import vocab_size
from .decode.step import Greedy, Verify, verify_forward, verify_step
from .drafters.base import Drafter
from .drafters.draft_model import DraftModelDrafter
from .drafters.ngram_mod import NgramModTable
from .drafters.spec import DraftResources, DraftSpec, build_drafter, parse_tree_budget
from .eagle.head import DraftHead
from .measure_floor import ROUNDS, Floors, dips, lower_envelope, timed_floors
from .policy.tree_shape import TreeShaper, cost_at

MAX_AUTO_NODES = 32
# ``auto`` measures the curve densely to this block length and sparsely beyond (the first
# use of a model measures it once; ``cost_curve_for`` caches it on disk).
AUTO_CURVE_LEN = 17
AUTO_CURVE_EXTRA = (24, 33)
# block lengths (1 + nodes) at which tree steps are timed against linear ones
AUTO_TREE_CURVE = (3, 5, 9, 17, 25, 33)


def _interleaved_floors(lengths: list[int], repeats: int,
                        once: Callable[[int], None]) -> dict[int, float]:
    """Floor seconds of ``once(L)`` per L, interleaved (``measure_floor.timed_floors``)."""
    return timed_floors(lengths, repeats, once).curve


def _context(model: Model, lengths: list[int], context: int, rng: random.Random) -> tuple:
    """(vocab, cache holding ``context - 1`` random tokens, the ``context`` tokens)."""
    vocab = vocab_size(model)
    cache = make_cache(model, max_trim=max(lengths) + 1, recurrent=True)  # hybrids: verify_forward
    ids = [rng.randrange(vocab) for _ in range(context)]
    prefill(model, cache, ids[:-1])
    return vocab, cache, ids


def verify_cost_floors(
    model: Model, max_len: int = 17, *, context: int = 256, repeats: int = 7, seed: int = 0,
    extra: tuple[int, ...] = (),
) -> Floors:
    """{L: seconds of one L-token forward} at 1..``max_len`` and ``extra`` after ``context``
    tokens: the floor of ``repeats`` interleaved timings (contention only adds time), timed
    again where it dips, then capped (``measure_floor``; ``Floors.capped``: the lengths capped)."""
    rng = random.Random(seed)
    lengths = sorted(set(range(1, max_len + 1)) | set(extra))
    vocab, cache, _ = _context(model, lengths, context, rng)

    def once(L: int) -> None:
        block = [[rng.randrange(vocab) for _ in range(L)]]
        mx.eval(mx.argmax(verify_forward(model, cache, block)[0], axis=-1))
        trim(cache, L)

    return timed_floors(lengths, repeats, once, rounds=ROUNDS, rising=True)


def verify_cost_curve(
    model: Model, max_len: int = 17, *, context: int = 256, repeats: int = 7, seed: int = 0,
    extra: tuple[int, ...] = (),
) -> dict[int, float]:
    """``verify_cost_floors``' curve: a rising {L: seconds}."""
    return verify_cost_floors(model, max_len, context=context, repeats=repeats, seed=seed,
                              extra=extra).curve


def tree_overhead(model: Model, lengths: tuple[int, ...], *, context: int = 256,
                  repeats: int = 7, seed: int = 0) -> dict[int, float]:
    """{L: seconds of a greedy tree step / seconds of a linear step}, both with L - 1
    drafted nodes (the tree: two branches of half the nodes each; L >= 3), interleaved."""
    if min(lengths) < 3:
        raise ValueError("a tree step needs at least 2 nodes (L >= 3)")
    rng = random.Random(seed)
    vocab, cache, ids = _context(model, sorted(lengths), context, rng)

    def once(key: int) -> None:  # key = L (a linear step) or -L (a tree step)
        n = abs(key) - 1
        tokens = [rng.randrange(vocab) for _ in range(n)]
        half = n // 2
        parents = None if key > 0 else [-1, *range(half - 1), -1, *range(half, n - 1)][:n]
        step, = verify_step(model, cache, [Verify(ids, Proposal(tokens, parents=parents), Greedy())],
                            vocab=vocab)
        trim(cache, step.accepted + 1)

    med = _interleaved_floors([key for L in sorted(lengths) for key in (L, -L)], repeats, once)
    return {L: med[-L] / med[L] for L in lengths}


def proposal_cost(
    drafter: Drafter, context_len: int, *, k: int = 8, vocab: int = 49152, repeats: int = 200, seed: int = 0
) -> float:
    rng = random.Random(seed)
    # Natural-ish text: a mix of repeated phrases and fresh tokens.
    phrases = [[rng.randrange(vocab) for _ in range(rng.randint(3, 12))] for _ in range(64)]
    ctx: list[int] = []
    while len(ctx) < context_len:
        ctx += rng.choice(phrases) if rng.random() < 0.5 else [rng.randrange(vocab)]
    ctx = ctx[:context_len]
    drafter.begin(ctx)  # a request starts: the drafter indexes the prompt
    drafter.propose(ctx, k)
    times = []
    for _ in range(repeats):
        ctx.append(rng.randrange(vocab))  # one new token per step, as in decoding
        t0 = time.perf_counter()
        drafter.propose(ctx, k)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def model_fingerprint(model: Model) -> str:
    """A key for cached measurements: architecture args, weight dtype and layout, mlx device."""
    args = getattr(model, "args", None)
    desc = json.dumps(vars(args) if args is not None else {}, sort_keys=True, default=str)
    first = flat_weights(model)[0][1]
    layout = getattr(model, "specdec_weight_layout", "")  # loader.api.column_major_weights
    raw = f"{desc}|{first.dtype}|{mx.default_device()}|{os.cpu_count()}" + (f"|{layout}" if layout else "")
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _curve_name(model: Model) -> str:
    """The verify cost curve's cache file: "-floor" since the curve is floors, so a median
    cached before (it moved with the machine's load) is measured again."""
    return f"{model_fingerprint(model)}-floor"


def _cache_path(name: str, cache_dir: str | Path | None) -> Path:
    env = os.environ.get("SPECDEC_CACHE_DIR")
    root = Path(cache_dir) if cache_dir else Path(env) if env is not None else \
        Path.home() / ".cache" / "specdec"
    return root / "cost" / f"{name}.json"


def cost_cache_file(name: str) -> Path:
    """The JSON file ``name`` under the cost cache ($SPECDEC_CACHE_DIR/cost, read at each call)."""
    return _cache_path(name, None)


def _store(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)  # atomic: concurrent processes never read half a file


def _cached(name: str, measure: Callable[[], dict], cache_dir: str | Path | None,
            complete: Callable[[dict], bool] = bool) -> dict:
    """``measure()`` once per ``name`` (a JSON file under the cost cache), re-measured when
    the cached value is not ``complete``; written atomically."""
    path = _cache_path(name, cache_dir)
    if path.exists():
        value = json.loads(path.read_text())
        if complete(value):
            return value
    value = measure()
    _store(path, value)
    return value


def _read_curve(path: Path) -> dict[int, float]:
    return {int(k): v for k, v in json.loads(path.read_text()).items()} if path.exists() else {}


def _merged(old: dict[int, float], new: dict[int, float], floors: bool) -> dict[int, float]:
    """``new`` merged over ``old`` (a ratio curve: ``new`` wins). ``floors`` (a verify cost
    curve): each length the lower of the two, since contention only adds time (a curve capped
    under load gives way to a quieter reading: a calibration's, or a later one's of more
    lengths). Where the merge dips: two rising readings from different runs disagree (a
    longer block's floor under a shorter one's), so each length is capped by every longer
    one's (``lower_envelope``: contention only adds time) and none is lost (dropping them
    made two callers with different lengths, a bench's trees and a CLI's ``auto``, measure
    again at every use); where the old curve itself dips (timed under load), its lengths
    are dropped instead; if even that dips, ``new`` alone."""
    if not floors:
        return {**old, **new}
    lower = {L: min(t, old.get(L, t)) for L, t in new.items()}
    merged = {**old, **lower}
    if dips(merged) and not dips(old) and not dips(lower):
        return lower_envelope(merged)
    return next((c for c in (merged, lower) if not dips(c)), new)


def _store_curve(name: str, curve: dict[int, float], cache_dir: str | Path | None,
                 floors: bool) -> dict[int, float]:
    """The one writer of cached curves: ``curve`` merged over what is cached (``_merged``),
    written atomically; returns what was written."""
    path = _cache_path(name, cache_dir)
    merged = dict(sorted(_merged(_read_curve(path), curve, floors).items()))
    _store(path, {str(L): t for L, t in merged.items()})
    return merged


def _cached_curve(name: str, want: list[int], measure: Callable[[], dict[int, float]],
                  cache_dir: str | Path | None, floors: bool = False) -> dict[int, float]:
    """A cached {L: seconds} curve, re-measured when it lacks a length in ``want`` (``floors``:
    or dips); what is measured is merged over what was cached (``_store_curve``: a server's
    batch curve and a CLI's ``auto`` curve share one file, neither erases the other's lengths)."""
    cached = _read_curve(_cache_path(name, cache_dir))
    if all(L in cached for L in want) and not (floors and dips(cached)):
        return cached
    return _store_curve(name, measure(), cache_dir, floors)


def cost_curve_for(model: Model, max_len: int, cache_dir: str | Path | None = None,
                   extra: tuple[int, ...] = ()) -> dict[int, float]:
    """The model's verify cost curve at 1..``max_len`` and ``extra``, measured once and
    cached on disk, merged over what was cached before (``_merged``: each length's lower
    reading, older lengths dropped where they would make it dip). A curve capped after
    re-timing is cached too (an upper bound, rising; logged): measuring at every use on a
    loaded machine would cost each request seconds; a quieter reading later lowers it."""
    want = [*range(1, max_len + 1), *extra]
    return _cached_curve(_curve_name(model), want,
                         lambda: verify_cost_floors(model, max_len, extra=extra).curve,
                         cache_dir, floors=True)


def cost_curve_path(model: Model, cache_dir: str | Path | None = None) -> Path:
    """The file ``model``'s verify cost curve is cached in (it may not exist yet)."""
    return _cache_path(_curve_name(model), cache_dir)


def cached_cost_curve(model: Model, lengths: list[int],
                      cache_dir: str | Path | None = None) -> dict[int, float] | None:
    """The model's cached verify cost curve when it holds every length in ``lengths`` and
    rises (``measure_floor.dips``), else None (measures nothing: see ``calibrate.Calibration``)."""
    path = cost_curve_path(model, cache_dir)
    if not path.exists():
        return None
    curve = {int(k): v for k, v in json.loads(path.read_text()).items()}
    return curve if all(L in curve for L in lengths) and not dips(curve) else None


def store_cost_curve(model: Model, curve: dict[int, float], cache_dir: str | Path | None = None) -> None:
    """Cache a verify cost curve measured elsewhere (``calibrate.Calibration``), merged over what
    is cached (``_merged``: each length's lower reading)."""
    _store_curve(_curve_name(model), curve, cache_dir, floors=True)


def _tree_overhead_name(model: Model) -> str:
    return f"{model_fingerprint(model)}-tree-overhead"


def tree_overhead_for(model: Model, lengths: tuple[int, ...],
                      cache_dir: str | Path | None = None) -> dict[int, float]:
    """The model's tree step overhead at ``lengths``, measured once and cached on disk."""
    return _cached_curve(_tree_overhead_name(model), list(lengths),
                         lambda: tree_overhead(model, lengths), cache_dir)


def store_tree_overhead(model: Model, ratios: dict[int, float], cache_dir: str | Path | None = None) -> None:
    """Cache a tree step's overhead over a linear one ({L: ratio}) known elsewhere, merged
    over what is cached (``tree_overhead_for`` then measures nothing at those lengths)."""
    _store_curve(_tree_overhead_name(model), ratios, cache_dir, floors=False)


def resolve_tree_budget(model: Model, value: int | str, *,
                        propose_cost: float = 0.0) -> tuple[int, TreeShaper | None]:
    """(node budget, shaper): an integer budget is fixed (0 = linear drafts); ``"auto"``
    asks the drafter for up to ``MAX_AUTO_NODES`` nodes and lets a ``TreeShaper`` on the
    model's (cached) verify cost curve pick how many to verify at each step, counting
    ``propose_cost`` (seconds, the drafter's own cost per proposal) in every step."""
    budget = parse_tree_budget(value, text=False)
    if isinstance(budget, int):  # else "auto"
        return budget, None
    cost = cost_curve_for(model, AUTO_CURVE_LEN, extra=AUTO_CURVE_EXTRA)
    # a tree block costs a linear block of its length times the measured overhead
    over = tree_overhead_for(model, AUTO_TREE_CURVE)
    tree_cost = {L: cost_at(cost, L) * r for L, r in over.items()}
    return MAX_AUTO_NODES, TreeShaper(cost, MAX_AUTO_NODES, tree_cost, propose_cost=propose_cost)


# ---- the drafter's own cost ---------------------------------------------------------------
DRAFT_COST_KS = (1, 8)


def draft_model_cost(draft_model: Model, *, context: int = 256, ks: tuple[int, int] = DRAFT_COST_KS,
                     repeats: int = 7, seed: int = 0) -> dict[str, float]:
    """{"fixed", "per_token"} seconds of ``DraftModelDrafter.propose`` (greedy): interleaved
    floors at the two ``ks``, one new context token per call as in decoding, fitted
    through both points (clamped at 0)."""
    rng = random.Random(seed)
    vocab = vocab_size(draft_model)
    drafter = DraftModelDrafter(draft_model, max_trim=max(ks) + 1)
    ctx = [rng.randrange(vocab) for _ in range(context)]
    drafter.begin(ctx)

    def once(k: int) -> None:
        ctx.append(rng.randrange(vocab))
        drafter.propose(ctx, k)

    med = _interleaved_floors(sorted(ks), repeats, once)
    lo, hi = min(ks), max(ks)
    per = max((med[hi] - med[lo]) / (hi - lo), 0.0)
    return {"fixed": max(med[lo] - per * lo, 0.0), "per_token": per}


def tail_cost(model: Model, *, context: int = 256, ks: tuple[int, int] = DRAFT_COST_KS,
              repeats: int = 7, seed: int = 0) -> dict[str, float]:
    """{"fixed", "per_token"} seconds the wedlm drafter's tail of k + 1 masks adds to a verify
    block of 1 + k tokens (``drafters.wedlm``): interleaved floors of both blocks at the two
    ``ks``, the differences fitted through both points (clamped at 0)."""
    lo, hi = sorted(ks)
    med = verify_cost_curve(model, context=context, repeats=repeats, seed=seed, max_len=1,
                            extra=(1 + lo, 2 * lo + 2, 1 + hi, 2 * hi + 2))
    extra = {k: med[2 * k + 2] - med[1 + k] for k in (lo, hi)}
    per = max((extra[hi] - extra[lo]) / (hi - lo), 0.0)
    return {"fixed": max(extra[lo] - per * lo, 0.0), "per_token": per}


def head_cost(head: DraftHead, *, context: int = 256, ks: tuple[int, int] = DRAFT_COST_KS,
              repeats: int = 7, seed: int = 0) -> dict[str, float]:
    """{"fixed", "per_token"} seconds of a head's proposal (``draft``: one newly verified row
    fed, k drafted; an EAGLE-3 head or an MTP block: ``eagle.head.DraftHead``) after ``context``
    fed positions: interleaved floors at the two ``ks``, fitted through both points (clamped at 0)."""
    width, vocab = head.feature_width, head.vocab_size
    key = mx.random.key(seed)
    feats = mx.random.normal((1, context + 1, width), key=key)
    toks = mx.random.randint(0, vocab, (1, context + 1), key=key)
    cache = head.make_cache()
    mx.eval(head.feed(cache, feats[:, :context], toks[:, :context]))

    def once(k: int) -> None:
        head.draft(cache, feats[:, context:], toks[:, context:], k)
        cache[0].trim(1)  # the same context every time

    med = _interleaved_floors(sorted(ks), repeats, once)
    lo, hi = sorted(ks)
    per = max((med[hi] - med[lo]) / (hi - lo), 0.0)
    return {"fixed": max(med[lo] - per * lo, 0.0), "per_token": per}


def head_fingerprint(head: DraftHead) -> str:
    """A key for a head's cached cost: what shapes it (``describe``) and its weight dtype."""
    raw = f"{json.dumps(head.describe(), sort_keys=True, default=str)}|{head.fc.weight.dtype}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _host_drafter(name: str) -> Drafter:
    """The drafter ``DraftSpec(name)`` builds, with a fresh table for ngram-mod."""
    return build_drafter(DraftSpec(name, gate=False), DraftResources(table=NgramModTable()))


def draft_cost_for(drafter_name: str, model: Model, draft_model: Model | None = None, *,
                   cache_dir: str | Path | None = None, head: DraftHead | None = None,
                   mtp: DraftHead | None = None) -> dict[str, Any]:
    """The drafter's proposal cost model {"fixed", "per_token"} in seconds (docs/gate.md#measuring-costs),
    measured once and cached on disk; a chain's is its members' sum, with ``"members"``:
    {name: cost}. ``drafter_name`` is a draft type or a chain of them;
    ``"model"`` needs ``draft_model``, ``"eagle"`` the loaded ``head``, ``"mtp"`` the loaded
    MTP block (``mtp``)."""
    names = DraftSpec(drafter_name).draft_types
    if len(names) > 1:  # every member proposing: an upper bound for a chain; "members": each
        # member's own, so the gate prices a step by the member that proposed (ChainDrafter)
        parts = {n: draft_cost_for(n, model, draft_model, cache_dir=cache_dir, head=head, mtp=mtp)
                 for n in names}
        total = {key: sum(p[key] for p in parts.values()) for key in ("fixed", "per_token")}
        return {**total, "members": parts}
    name = names[0]
    complete = lambda d: {"fixed", "per_token"} <= set(d)  # noqa: E731
    if name == "none":
        return {"fixed": 0.0, "per_token": 0.0}
    if name == "model":
        if draft_model is None:
            raise ValueError("the draft model's cost needs the loaded draft model (--draft-model)")
        key = f"draft-model-{model_fingerprint(model)}-{model_fingerprint(draft_model)}"
        return _cached(key, lambda: draft_model_cost(draft_model), cache_dir, complete=complete)
    if name in ("eagle", "mtp"):  # the head's forwards; its features ride on the target's own
        loaded = head if name == "eagle" else mtp
        if loaded is None:
            raise ValueError(f"the {name} drafter's cost needs its loaded head (eagle: --draft-model "
                             "DIR; mtp: the checkpoint's MTP block, eagle.mtp.load_for)")
        key = f"draft-{name}-{model_fingerprint(model)}-{head_fingerprint(loaded)}"
        return _cached(key, lambda: head_cost(loaded), cache_dir, complete=complete)
    if name == "wedlm":  # k + 1 masks riding on the verify block of the target itself
        key = f"draft-wedlm-tail-{model_fingerprint(model)}"
        return _cached(key, lambda: tail_cost(model), cache_dir, complete=complete)
    vocab = vocab_size(model)

    def host() -> dict[str, float]:
        return {"fixed": proposal_cost(_host_drafter(name), 256, k=8, vocab=vocab), "per_token": 0.0}

    return _cached(f"draft-{name}-v{vocab}", host, cache_dir, complete=complete)
