"""Speculative decoding on a target sharded over an ``mlx.distributed`` group (``mlx.launch``).

Contract: ``shard(model, group)`` splits with the class's ``shard()`` or ``pipeline()``
(else ``DistributedError``); rank 0 runs the ordinary engine on ``LeaderModel``, every other
rank ``follow``s. Each leader forward first sends its tokens and cache position by one
``all_sum``, so acceptance is decided on rank 0 alone and rollback needs no message of its
own. A dead rank fails the next collective, a hung one trips the ``Watchdog``; a follower
without a leader exits with ``GroupLost``.
Tests: tests/test_distributed.py (ranks: tests/distributed_ranks.py). Details:
docs/loading.md#distributed-sharded-targets."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

import mlx.core as mx
from mlx_lm.models.cache import QuantizedKVCache

from .cache.recurrent import has_recurrent
from .cache.rollback import WindowKVCache, layer_caches, make_cache, trim
from .core.arrays import ints
from .core.model import Model
from .loader import load
from .loader.api import column_major_weights

# header: op, new cache?, has cache?, leader's cache offset, n tokens, kv_bits (0 = none),
# kv_group_size, window slack; then the first INLINE tokens (more go in a second message)
HEADER, INLINE = 8, 16
OP_FORWARD, OP_STOP = 1, 2


class DistributedError(ValueError):
    """The model or the flags cannot run sharded; the message says what to do."""


class GroupLost(RuntimeError):
    """A rank of the group died or stopped answering."""


def init_group() -> Any:
    """The group ``mlx.launch`` started this process in (size 1 when run alone)."""
    if not mx.distributed.is_available():
        raise DistributedError("this MLX build has no distributed backend: install an mlx with "
                               "the ring or MPI backend to use --distributed")
    return mx.distributed.init()


def shard(model: Model, group: Any) -> str:
    """Shard ``model`` over ``group`` in place with mlx-lm's own method; returns its name."""
    if has_recurrent(layer_caches(model)):  # the followers mirror trims, not recurrent rollback
        raise DistributedError("models with recurrent layers (hybrids) are not supported with "
                               "--distributed yet: run the model on one machine")
    n = group.size()
    # mlx-lm's split methods, on the classes that have them (not part of the Model seam)
    kind = next((k for k in ("shard", "pipeline") if callable(getattr(model, k, None))), None)
    if kind is None:
        raise DistributedError(
            f"the mlx-lm model class {type(model).__module__}.{type(model).__name__} has neither "
            "shard() nor pipeline(), so it cannot be split over a group: run it without "
            "--distributed, or use a model whose mlx-lm class can be sharded (llama, qwen2, ...)")
    if n == 1:
        return kind
    if kind == "shard":
        args = getattr(model, "args", None)
        for name in ("num_attention_heads", "num_key_value_heads"):
            heads = getattr(args, name, None)
            if isinstance(heads, int) and heads % n:
                raise DistributedError(f"{name} = {heads} does not divide by the group size {n}: "
                                       "launch a group whose size divides it")
    getattr(model, kind)(group)
    mx.eval(model.parameters())  # materialise the slices now, freeing the full weights
    return kind


def refuse_unsharded_features(*, tree_budget: Any = 0, prompt_cache_file: Any = None) -> None:
    """Refuse, at start-up, what the other ranks could not mirror (raises ``DistributedError``)."""
    if prompt_cache_file:  # the other ranks could not hold the loaded cache
        raise DistributedError("--prompt-cache-file does not work with --distributed")
    if tree_budget:  # rank 0 alone would apply the tree mask and positions
        raise DistributedError("--draft-tree-budget does not work with --distributed yet: use "
                               "linear drafts (--draft-tree-budget 0)")


def is_group_failure(e: BaseException) -> bool:
    """Whether ``e`` is a collective failing because a peer is gone."""
    if isinstance(e, GroupLost):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and (text.startswith("[ring]") or text.startswith("[mpi]")
                                            or "peer" in text)


def _cache_shape(cache: list | None) -> tuple[int, int, int]:
    """(kv_bits or 0, kv_group_size, window slack) of a ``rollback.make_cache`` cache, so a
    follower can build the same kinds of layer."""
    bits, group, slack = 0, 64, 16
    for c in cache or []:
        if isinstance(c, QuantizedKVCache):
            bits, group = c.bits, c.group_size
        elif isinstance(c, WindowKVCache):
            slack = c.slack
    return bits, group, slack


def _broadcast_tokens(group: Any, header: list[int], tokens: mx.array | None) -> mx.array:
    """All ranks' sum of the message; only the leader passes ``tokens`` (the others zeros).
    Returns the received tokens (the leader's, as every rank sees them)."""
    n = header[4]
    head = mx.array(header, dtype=mx.int32)
    if tokens is None:
        body = mx.zeros((INLINE,), mx.int32)
    else:
        flat = tokens.reshape(-1).astype(mx.int32)
        body = mx.pad(flat[:INLINE], [(0, INLINE - min(n, INLINE))])
    recv = mx.distributed.all_sum(mx.concatenate([head, body]), group=group)
    got = recv[HEADER:HEADER + min(n, INLINE)]
    if n > INLINE:  # a prefill chunk or a long draft: one more message of the exact size
        rest = mx.zeros((n - INLINE,), mx.int32) if tokens is None else flat[INLINE:]
        got = mx.concatenate([got, mx.distributed.all_sum(rest, group=group)])
    return got


class Watchdog:
    """Calls ``on_hang(seconds)`` once when a request sees no ``beat`` for ``timeout`` s."""

    def __init__(self, timeout: float, on_hang: Callable[[float], None]):
        if timeout <= 0:
            raise DistributedError(f"--distributed-timeout must be > 0, got {timeout}")
        self.timeout, self.on_hang = timeout, on_hang
        self._last: float | None = None  # None: no request running
        self.fired = False
        threading.Thread(target=self._watch, name="specdec-watchdog", daemon=True).start()

    def beat(self) -> None:
        """Progress (arms the watchdog: a request is running)."""
        self._last = time.monotonic()

    def disarm(self) -> None:
        """Idle between requests: no deadline."""
        self._last = None

    def _watch(self) -> None:
        while not self.fired:
            time.sleep(min(1.0, self.timeout / 4))
            last = self._last
            if last is not None and time.monotonic() - last > self.timeout:
                self.fired = True
                self.on_hang(time.monotonic() - last)


class LeaderModel:
    """Rank 0's view of the sharded target: the model, but each call first tells the
    other ranks what to run (docs/loading.md#distributed-sharded-targets). Attributes are the model's."""

    # A token-tree forward swaps rank 0's RoPE modules and cache masks only: the other
    # ranks' heads would attend causally at linear positions, so trees are refused.
    verifies_trees = False

    def __init__(self, model: Model, group: Any, watchdog: Watchdog | None = None):
        self.model, self.group, self.watchdog = model, group, watchdog
        # every collective of rank 0 on one stream, in program order, as the followers run
        # them: a caller's stream (mlx-lm's generation_stream) would reorder them
        self.stream = mx.default_stream(mx.default_device())
        self._cache: list | None = None  # the cache the followers mirror
        self.forwards = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["model"], name)

    def __call__(self, inputs: mx.array, cache: list | None = None, **kw: Any) -> mx.array:
        if kw:
            raise DistributedError(f"a sharded forward takes no extra arguments ({', '.join(kw)})")
        new = cache is not None and cache is not self._cache
        offset = cache[0].offset if cache else 0
        if new and offset:
            raise DistributedError(
                "this cache was not built on the group (a loaded or forked prompt cache): the "
                "other ranks cannot hold its contents; use a fresh cache with --distributed")
        if new:
            self._cache = cache  # held, so its id is never reused by another list
        if self.watchdog is not None:
            # armed before the collectives: with a peer gone, async_eval itself can block
            # (first forward of a request, the watchdog disarmed while idle)
            self.watchdog.beat()
        header = [OP_FORWARD, int(new), int(cache is not None), offset, inputs.size,
                  *_cache_shape(cache if new else None)]
        with mx.stream(self.stream):
            tokens = _broadcast_tokens(self.group, header, inputs).reshape(inputs.shape)
            out = self.model(tokens.astype(inputs.dtype), cache=cache)
            # the followers evaluate the whole forward, so the leader must too, even where
            # the caller keeps only the cache (prefill): else the last layer's collectives differ
            mx.async_eval(out)
        self.forwards += 1
        if self.watchdog is not None:
            self.watchdog.beat()
        return out

    def stop(self) -> None:
        """Tell the followers to exit (call once, when no more forwards will come)."""
        with mx.stream(self.stream):
            mx.eval(_broadcast_tokens(self.group, [OP_STOP, 0, 0, 0, 0, 0, 0, 0], None))


def follow(model: Model, group: Any) -> int:
    """A follower's loop: run each forward the leader announces, until it stops.
    Returns the number of forwards run; raises ``GroupLost`` if the leader disappears."""
    cache: list[Any] | None = None
    forwards = 0
    while True:
        try:
            recv = mx.distributed.all_sum(mx.zeros((HEADER + INLINE,), mx.int32), group=group)
            op, new, has_cache, offset, n, bits, gsize, slack = ints(recv[:HEADER])
        except RuntimeError as e:
            raise GroupLost(f"rank {group.rank()}: lost the leader (rank 0): {e}") from e
        if op == OP_STOP:
            return forwards
        if op != OP_FORWARD:
            raise GroupLost(f"rank {group.rank()}: unknown message {op} (mismatched specdec versions?)")
        if new:
            cache = make_cache(model, max_trim=slack, rollback=False, kv_bits=bits or None,
                               kv_group_size=gsize)
        held = cache if has_cache else None
        if has_cache and held is None:  # a cached forward before any cache was announced
            raise GroupLost(f"rank {group.rank()}: the leader ran on a cache it never announced "
                            "(mismatched specdec versions?)")
        if held is not None and held[0].offset != offset:  # the leader rolled back: do the same
            if held[0].offset < offset:
                raise GroupLost(f"rank {group.rank()}: out of step with the leader (cache at "
                                f"{held[0].offset}, leader at {offset})")
            trim(held, held[0].offset - offset)
        tokens = recv[HEADER:HEADER + min(n, INLINE)]
        if n > INLINE:
            tokens = mx.concatenate([tokens, mx.distributed.all_sum(
                mx.zeros((n - INLINE,), mx.int32), group=group)])
        try:
            mx.eval(model(tokens[None], cache=held))
        except RuntimeError as e:
            raise GroupLost(f"rank {group.rank()}: the group failed mid-forward: {e}") from e
        forwards += 1


def _say(msg: str) -> None:
    print(f"specdec: error: {msg}", file=sys.stderr, flush=True)


def load_sharded(model_name: str, dtype: str) -> tuple[Any, Any, Any]:
    """(group, sharded model, tokenizer) on this rank."""
    group = init_group()
    model, tokenizer = load(model_name, dtype=dtype)
    shard(model, group)
    if getattr(model, "specdec_weight_layout", None):  # the shards are row-major copies
        column_major_weights(model)
    return group, model, tokenizer


def run_sharded(group: Any, model: Model, tokenizer: Any, timeout: float,
                body: Callable[[Any, Any], int]) -> int:
    """``specdec generate --distributed`` on a sharded model: rank 0 runs
    ``body(leader_model, tokenizer)`` and then stops the followers; the others follow and
    print nothing. A lost or hung rank ends rank 0 with a message and exit status 3."""
    if group.rank() > 0:
        return _follow_until_stopped(model, group)

    def hung(seconds: float) -> None:  # on the watchdog's thread: the main one is stuck
        _say(f"the distributed group stopped answering: no forward finished for {seconds:.0f} s "
             f"(a rank hung or its network is down; --distributed-timeout {timeout:g}); stopping")
        os._exit(3)

    watchdog = Watchdog(timeout, hung)
    leader = LeaderModel(model, group, watchdog)
    try:
        status = body(leader, tokenizer)
    except Exception as e:
        if not is_group_failure(e):
            leader.stop()  # a local error: the followers are healthy and waiting
            raise
        _say(f"the distributed group lost a rank ({e}); stopping. Restart the whole group "
             "(mlx.launch) to go on")
        return 3
    watchdog.disarm()
    leader.stop()
    return status


def serve_follower(model_name: str, dtype: str, group: Any) -> int:
    """``specdec serve --distributed`` on a rank > 0: load, shard, follow rank 0's
    inference thread until it stops (0) or is lost (3)."""
    model, _ = load(model_name, dtype=dtype)
    shard(model, group)
    return _follow_until_stopped(model, group)


def _follow_until_stopped(model: Model, group: Any) -> int:
    """A rank > 0: follow rank 0 until it stops (0) or is lost (3, with the reason)."""
    try:
        follow(model, group)
    except GroupLost as e:
        _say(str(e))
        return 3
    return 0
