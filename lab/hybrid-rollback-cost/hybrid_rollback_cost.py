"""What rolling back a hybrid model's recurrent layers costs (issue #25), measured.

Builds qwen3_next-like random-weight models from mlx-lm's own ``qwen3_next`` classes at
three sizes (``SIZES``: gated-delta linear-attention layers with full attention every 2nd
(tiny) or 4th layer, as Qwen3-Next; dense MLPs in place of its experts), prefills a
``--context``-token prompt through specdec's cache (``make_cache(..., recurrent=True)``,
``prefill``), and times, for k = ``--k`` drafts (a k+1-token verify block), interleaved in
rounds (round 0 a warm-up; medians over the rest), the two ways ``RecurrentCache.rewind``
can rebuild the recurrent states after a rejection that keeps j tokens (the root and
j - 1 accepted drafts):

- ``plain``: one decode step, one token through the model on the same cache (argmax);
- ``accept``: a verify step of k drafts that accepts them all (nothing to roll back);
- ``replay j`` (the default kind): the same block with the j-th draft wrong; the rewind
  re-runs each recurrent layer on its j kept input rows (``cache/replay.py``) and the
  timing includes evaluating every cache array, so the replay is inside it; rollback
  cost = replay j - accept (paired per round, median);
- ``rewind j``: the replay alone, with nothing else in the timing: the same block's forward
  evaluated first (untimed), then ``rewind`` and the evaluation of every cache array
  (timed): the direct cost, free of the paired difference's noise (two steps' jitter on a
  shared machine is larger than the replay);
- ``full j``: a verify step after a step that accepted everything it drafted and emitted
  j tokens (no pending tokens);
- ``kept j`` (the ``refeed`` kind, deferred): the same verify step after a rejection that
  kept j tokens, which ``rewind`` left ``pending`` to ride in front of this block;
  rollback cost = kept j - full j;
- ``eager j``: the refeed kind with ``settle()`` feeding the kept tokens in a forward of
  their own, then the verify step; cost = eager j - full j.

Every measured step is specdec's own ``decode.step.verify_step`` (a ``Greedy`` sampler,
drafts from the model's greedy continuation; the rollback runs through
``batch_cache.roll_back``); the timing ends after ``mx.eval`` of the step's outputs and of
every cache array, so each forward it caused is inside it. Setup steps are untimed; the
cache goes back to the prefilled state between measurements (``RecurrentCache.restore``).
Within a (round, j), full, kept and eager run the same block at the same position: they
differ only by the pending tokens; replay and accept run the same block too.

    python lab/hybrid-rollback-cost/hybrid_rollback_cost.py [--sizes tiny,h512,h1024] [--rounds 8] [--out F]

Prints a table (each kind's rollback cost as % of the k+1-token verify step and of one
plain decode step, per size and j, then per size the pooled figures: the deferred re-feed
per kept token and the eager re-feed whatever j, medians over every (round, j), which a
shared machine moves far less than one j's median); ``--out`` writes the JSON of
``measure`` per size (with the raw times, the context and the greedy truth).
``measure(model, ...)`` is importable (``tests/cache/test_recurrent_rollback_cost.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models import qwen3_next
from mlx_lm.models.cache import ArraysCache

from specdec.cache.rollback import make_cache, prefill
from specdec.core.proposal import Proposal
from specdec.decode.step import Greedy, Step, Verify, verify_step
from specdec.engine import token_stream

_DENSE = dict(num_experts=0, num_experts_per_tok=1, decoder_sparse_step=1, moe_intermediate_size=64,
              shared_expert_intermediate_size=64, partial_rotary_factor=0.25, rope_theta=10000.0,
              max_position_embeddings=4096, rms_norm_eps=1e-6, linear_conv_kernel_dim=4)


def _size(hidden: int, layers: int, interval: int, heads: int, head_dim: int, lin_v: int,
          lin_k: int, lin_dim: int, mlp: int, vocab: int) -> dict:
    """A qwen3_next ``ModelArgs`` dict; every layer dense (``mlp_only_layers``)."""
    return dict(_DENSE, model_type="qwen3_next", hidden_size=hidden, num_hidden_layers=layers,
                full_attention_interval=interval, num_attention_heads=heads, num_key_value_heads=2,
                head_dim=head_dim, linear_num_value_heads=lin_v, linear_num_key_heads=lin_k,
                linear_key_head_dim=lin_dim, linear_value_head_dim=lin_dim, intermediate_size=mlp,
                mlp_only_layers=list(range(layers)), vocab_size=vocab)


# tiny: tests/hybrid_tiny.py's qwen3_next shape (its 64-token vocabulary widened); the
# others scale Qwen3-Next's proportions down (full attention every 4th layer, GQA 2 KV heads)
SIZES = {
    "tiny": _size(64, 4, 2, 4, 16, 4, 2, 16, 128, 4096),
    "h512": _size(512, 8, 4, 8, 64, 8, 4, 64, 1536, 32000),
    "h1024": _size(1024, 12, 4, 8, 128, 16, 8, 64, 3072, 32000),
}


def build(size: str, seed: int = 0) -> Any:
    """A random-weight model of ``SIZES[size]`` from mlx-lm's class, with mlx's own
    initialisation (what a forward costs depends on the shapes, not the values)."""
    mx.random.seed(seed)
    model = qwen3_next.Model(qwen3_next.ModelArgs.from_dict(SIZES[size]))
    mx.eval(model.parameters())
    return model


@dataclass
class Bench:
    """A model, its specdec cache holding ``context[:-1]`` (checkpointed), and ``truth``:
    the model's greedy continuation of ``context`` (the drafts every step proposes)."""

    model: Any
    cache: Any
    context: list[int]
    truth: list[int]
    k: int
    vocab: int = field(init=False)

    def __post_init__(self):
        self.vocab = self.model.args.vocab_size

    def arrays(self) -> list[mx.array]:
        """Every array the cache holds (attention: the valid positions)."""
        out = []
        for c in self.cache:  # qwen3_next: an ArraysCache or a KVCache per layer
            out += list(c.cache) if isinstance(c, ArraysCache) \
                else [c.keys[..., : c.offset, :], c.values[..., : c.offset, :]]
        return out

    def step(self, emitted: int, draft: list[int]) -> Step:
        """specdec's verify step on the context plus the first ``emitted`` truth tokens."""
        row = Verify(self.context + self.truth[:emitted], Proposal(draft), Greedy())
        return verify_step(self.model, self.cache, [row], vocab=self.vocab)[0]


def bench(model: Any, context_len: int = 256, k: int = 8, most_kept: int = 5, seed: int = 0) -> Bench:
    """Prefill a random ``context_len``-token prompt; the truth is plain greedy decoding's
    (specdec's ``token_stream`` without a drafter), long enough for every setup + step."""
    mx.random.seed(seed)
    context = mx.random.randint(0, model.args.vocab_size, (context_len,)).tolist()
    truth = [e.token for e in token_stream(model, context, max_tokens=most_kept + k + 1)]
    cache = make_cache(model, max_trim=k + 1, recurrent=True)
    prefill(model, cache, context[:-1])
    cache.checkpoint()
    return Bench(model, cache, context, truth, k)


_REFEED = ("full", "kept", "eager")


def _setup(b: Bench, variant: str, j: int) -> None:
    """Untimed: from the checkpoint, the step before the measured one (none for plain,
    accept and replay). ``full``: draft the j - 1 true tokens (all accepted, j emitted);
    ``kept``/``eager``: draft k tokens, the j-th wrong (j - 1 accepted, j emitted, j kept
    pending: the refeed kind)."""
    b.cache.restore()
    b.cache.kind = "refeed" if variant in _REFEED else "replay"
    if variant not in _REFEED:
        return
    good = b.truth[: j - 1]
    wrong = (b.truth[j - 1] + 1) % b.vocab
    draft = good if variant == "full" else good + [wrong] + b.truth[j : b.k]  # k drafts
    s = b.step(0, draft)
    if s.tokens != b.truth[:j]:
        raise RuntimeError(f"setup {variant} j={j}: emitted {s.tokens}, wanted {b.truth[:j]} "
                           f"(a near-tie between block shapes: try another --seed)")
    if len(b.cache.pending) != (0 if variant == "full" else j):
        raise RuntimeError(f"setup {variant} j={j}: the rollback left {b.cache.pending} pending")
    mx.eval(b.arrays())


def _timed(b: Bench, variant: str, j: int) -> tuple[float, Step | None]:
    """Seconds of the measured step (every forward it causes evaluated inside)."""
    if variant == "plain":
        t0 = time.perf_counter()
        y = mx.argmax(b.model(mx.array([b.context[-1:]]), cache=b.cache)[0, -1])
        mx.eval(y, b.arrays())
        return time.perf_counter() - t0, None
    if variant == "rewind":
        fed = b.context[-1:] + b.truth[: j - 1] + [(b.truth[j - 1] + 1) % b.vocab] + b.truth[j : b.k]
        b.cache.begin(fed)
        mx.eval(b.model(mx.array([fed]), cache=b.cache), b.arrays())
        t0 = time.perf_counter()
        b.cache.rewind(len(fed) - j)
        mx.eval(b.arrays())
        t = time.perf_counter() - t0
        if b.cache.pending or b.cache.last_rollback != "replay":
            raise RuntimeError(f"rewind j={j}: the rollback was {b.cache.last_rollback}")
        return t, None
    if variant in ("accept", "replay"):
        draft = list(b.truth[: b.k])
        if variant == "replay":
            draft[j - 1] = (draft[j - 1] + 1) % b.vocab
        t0 = time.perf_counter()
        s = b.step(0, draft)
        mx.eval(b.arrays())
        t = time.perf_counter() - t0
        if variant == "replay" and (b.cache.pending or b.cache.last_rollback != "replay"):
            raise RuntimeError(f"replay j={j}: the rollback was {b.cache.last_rollback}")
        return t, s
    t0 = time.perf_counter()
    if variant == "eager":
        b.cache.settle()  # the kept tokens in a forward of their own, before the block
    s = b.step(j, b.truth[j : j + b.k])
    mx.eval(b.arrays())
    return time.perf_counter() - t0, s


def _variants(kept: list[int], r: int) -> list[tuple[str, int]]:
    """Round r's order: rotated each round, so no variant always runs first after a setup."""
    order = [("plain", 0), ("accept", 0)]
    order += [(v, j) for j in kept for v in ("rewind", "replay", *_REFEED)]
    r %= len(order)
    return order[r:] + order[:r]


def _paired(times: dict[str, list[float]], what: str, base: str) -> list[float]:
    return [a - f for a, f in zip(times[what], times[base])]


def _summary(times: dict[str, list[float]], kept: list[int]) -> dict:
    med = {key: statistics.median(ts) for key, ts in times.items()}
    plain, rows = med["plain 0"], []
    for j in kept:
        alone = med[f"rewind {j}"]
        rows.append({"j": j, "how": "replay alone", "cost_ms": alone * 1e3,
                     "pct_verify_step": 100 * alone / med["accept 0"], "pct_decode_step": 100 * alone / plain})
        for what, how, base in (("replay", "replay", "accept 0"), ("kept", "deferred", f"full {j}"),
                                ("eager", "eager", f"full {j}")):
            cost = statistics.median(_paired(times, f"{what} {j}", base))
            rows.append({"j": j, "how": how, "cost_ms": cost * 1e3,
                         "pct_verify_step": 100 * cost / med[base],
                         "pct_decode_step": 100 * cost / plain})
    # robust numbers per size, pooled over every (round, j): one j's median of a few
    # paired differences swings by tens of points on a shared machine, the pool far less
    per = [d / j for j in kept for d in _paired(times, f"kept {j}", f"full {j}")]
    eager = [d for j in kept for d in _paired(times, f"eager {j}", f"full {j}")]
    replay = [d / j for j in kept for d in _paired(times, f"replay {j}", "accept 0")]
    verify = med["accept 0"]
    pooled = {name: {"cost_ms": statistics.median(xs) * 1e3,
                     "pct_verify_step": 100 * statistics.median(xs) / verify,
                     "pct_decode_step": 100 * statistics.median(xs) / plain}
              for name, xs in (("deferred_per_kept_token", per), ("eager_any_j", eager),
                               ("replay_per_kept_token", replay))}
    return {"median_ms": {key: t * 1e3 for key, t in med.items()}, "costs": rows, **pooled}


def measure(model: Any, *, rounds: int = 8, k: int = 8, kept: tuple[int, ...] = (1, 2, 4, 6, 8),
            context_len: int = 256, seed: int = 0, states: dict | None = None) -> dict:
    """Run the measurement (module docstring) on ``model``: ``rounds`` + 1 rounds, the
    first a warm-up. Returns raw times (s), medians (ms) and per-j costs; every measured
    step's emitted tokens (``tokens``: the same for full, kept and eager at each j, or the
    rollback is not exact; replay's are the j kept tokens). ``states``, when given,
    receives each variant's cache arrays after its last measured step (before the cache
    goes back)."""
    kept = list(kept)
    b = bench(model, context_len, k, max(kept), seed)
    times: dict[str, list[float]] = {f"{v} {j}": [] for v, j in _variants(kept, 0)}
    tokens: dict[str, list[int]] = {}
    for r in range(rounds + 1):
        for v, j in _variants(kept, r):
            _setup(b, v, j)
            t, s = _timed(b, v, j)
            if r:
                times[f"{v} {j}"].append(t)
            if s is not None:
                tokens[f"{v} {j}"] = s.tokens
            if states is not None:
                states[f"{v} {j}"] = b.arrays()
    b.cache.restore()
    b.cache.kind = "replay"
    return {"k": k, "context_len": context_len, "rounds": rounds, "times_s": times,
            "tokens": tokens, "context": b.context, "truth": b.truth, **_summary(times, kept)}


def table(results: dict[str, dict]) -> str:
    """The printed table: one line per size and j."""
    hows = ("replay alone", "replay", "deferred", "eager")
    head = (f"{'size':>6} {'j':>2} {'plain ms':>9} {'verify ms':>9} | "
            + " | ".join(f"{h + ' % verify':>21} {'% decode':>8}" for h in hows))
    lines = [head, "-" * len(head)]
    for size, res in results.items():
        rows = {(c["j"], c["how"]): c for c in res["costs"]}
        for j in sorted({c["j"] for c in res["costs"]}):
            cells = " | ".join(f"{rows[j, h]['pct_verify_step']:>21.1f} {rows[j, h]['pct_decode_step']:>8.1f}"
                               for h in hows)
            lines.append(f"{size:>6} {j:>2} {res['median_ms']['plain 0']:>9.2f} "
                         f"{res['median_ms']['accept 0']:>9.2f} | {cells}")
        for name, what in (("replay_per_kept_token", "replay, per kept token"),
                           ("deferred_per_kept_token", "deferred re-feed, per kept token"),
                           ("eager_any_j", "eager re-feed, j = any")):
            p = res[name]
            lines.append(f"{size:>6} pooled over j ({what}): {p['pct_verify_step']:.1f} % of the "
                         f"verify step, {p['pct_decode_step']:.1f} % of a decode step")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--rounds", type=int, default=8, help="measured rounds (plus one warm-up)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--kept", default="1,2,4,6,8")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    kept = tuple(map(int, args.kept.split(",")))
    results = {}
    for size in args.sizes.split(","):
        model = build(size, args.seed)
        t0 = time.perf_counter()
        results[size] = measure(model, rounds=args.rounds, k=args.k, kept=kept,
                                context_len=args.context, seed=args.seed)
        results[size]["config"], results[size]["wall_s"] = SIZES[size], time.perf_counter() - t0
        print(f"{size}: {results[size]['wall_s']:.0f} s", flush=True)
        del model
        mx.clear_cache()
    print(table(results))
    if args.out:
        meta = {"mlx": mx.__version__, "device": str(mx.default_device())}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "sizes": results}, f, indent=1)


if __name__ == "__main__":
    main()
