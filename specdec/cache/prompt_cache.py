"""A conversation's KV cache kept across calls, as mlx-lm's ``prompt_cache`` is.

Invariant: ``PromptCache.tokens`` is exactly what the layers hold (checked against every
layer's offset). ``reuse`` keeps the longest shared prefix or empties the cache (exact or
none, never approximate); ``settle`` trims to prompt + emitted after a call; ``fork`` shares
arrays, never objects; ``PrefixStore`` keeps finished caches under a byte budget (LRU);
``save``/``load_prompt_cache`` refuse another model's file. Recurrent models reuse only an
exact extension or their last prefill's checkpoint.
Tests: tests/cache/test_prompt_cache.py, tests/cache/test_recurrent.py. Details: docs/caches.md#the-prompt-cache."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Sequence, cast

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from ..core.arrays import flat_weights
from ..core.model import Model
from ..core.persist import atomic_write

from .recurrent import RecurrentCache
from .rollback import RollbackError, WindowKVCache, make_cache, trim

FORMAT = "specdec-prompt-cache-1"


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0,
                  limit: int | None = None) -> int:
    """Length of the longest common prefix, at most ``limit``. ``a[:start]`` and
    ``b[:start]`` are known to be equal and not compared again (a drafter that follows its
    context token by token compares only what is new).

    >>> common_prefix([1, 2, 3, 4], [1, 2, 5])
    2
    >>> common_prefix([1, 2, 3, 4], [1, 2, 3, 4, 5], start=2, limit=3)
    3
    """
    end = min(len(a), len(b), len(a) if limit is None else limit)
    n = max(0, min(start, end))
    while n < end and a[n] == b[n]:
        n += 1
    return n


def _fingerprint(model: Model) -> str:
    args = getattr(model, "args", None)
    desc = json.dumps(vars(args) if args is not None else {}, sort_keys=True, default=str)
    first = flat_weights(model)[0][1]
    return hashlib.sha256(f"{desc}|{first.dtype}".encode()).hexdigest()[:16]


class PromptCache:
    """A conversation's cache layers and ``tokens``, exactly what the layers hold:
    ``reuse`` before a prefill, ``settle`` after the call, ``fork``, ``save``."""

    def __init__(self, model: Model, *, max_draft_tokens: int = 32, kv_bits: int | None = None,
                 kv_group_size: int = 64):
        if max_draft_tokens < 1:
            raise ValueError(f"max_draft_tokens must be >= 1, got {max_draft_tokens}")
        self.max_draft_tokens, self.kv_bits, self.kv_group_size = max_draft_tokens, kv_bits, kv_group_size
        self.fingerprint = _fingerprint(model)
        self._model = model
        self.layers: list[Any] = []
        self.tokens: list[int] = []
        self.scope = ""  # whose prompt this is: a store only matches entries of one scope
        self.reset()

    def reset(self) -> None:
        """Empty the cache (fresh layers)."""
        self.layers = make_cache(self._model, max_trim=self.max_draft_tokens + 1, kv_bits=self.kv_bits,
                                 kv_group_size=self.kv_group_size, recurrent=True)
        self.tokens = []

    @property
    def nbytes(self) -> int:
        return sum(getattr(c, "nbytes", 0) for c in self.layers)

    def _held(self) -> set[int]:
        if isinstance(self.layers, RecurrentCache):
            return self.layers.positions()
        return {c.offset for c in self.layers}

    def _check(self) -> None:
        held = self._held()
        if held != {len(self.tokens)}:
            raise RuntimeError(f"prompt cache out of step: layers hold {sorted(held)} positions, "
                               f"tokens list {len(self.tokens)}")

    def reuse(self, model: Model, prompt_ids: Sequence[int], num_draft_tokens: int,
              kv_bits: int | None) -> int:
        """Roll back to the longest usable shared prefix of ``prompt_ids``; returns its length."""
        if model is not self._model and _fingerprint(model) != self.fingerprint:
            raise ValueError("this prompt cache was made for another model: make one per model")
        if kv_bits != self.kv_bits:
            raise ValueError(f"this prompt cache was made with kv_bits={self.kv_bits}, the call "
                             f"asks for {kv_bits}: make the cache with the same kv_bits")
        if num_draft_tokens > self.max_draft_tokens:
            raise ValueError(f"num_draft_tokens {num_draft_tokens} exceeds the prompt cache's "
                             f"max_draft_tokens {self.max_draft_tokens}: make it with a larger one")
        self._model = model
        self._check()
        keep = common_prefix(self.tokens, prompt_ids[:-1])
        if isinstance(self.layers, RecurrentCache) and keep < len(self.tokens):
            # a recurrent state cannot be trimmed: back to the last prefill's end if the
            # prompt shares it, else rebuild (exact or none)
            return self._restore_checkpoint(self.layers, keep)
        try:
            trim(self.layers, len(self.tokens) - keep)
        except RollbackError:  # a window layer dropped the positions we would return to
            self.reset()
            return 0
        del self.tokens[keep:]
        return keep

    def _restore_checkpoint(self, layers: RecurrentCache, keep: int) -> int:
        try:
            at: int | None = layers.restore()
        except RollbackError:
            at = None
        if at is None or at > keep:
            self.reset()
            return 0
        del self.tokens[at:]
        self._check()
        return at

    def checkpoint_at(self) -> int | None:
        """Where a recurrent cache can come back to (None: anywhere, it trims)."""
        if not isinstance(self.layers, RecurrentCache):
            return None
        return self.layers.checkpointed or 0

    def fed(self, tokens: Sequence[int]) -> None:
        """The caller fed ``tokens`` after the cached ones (the prefill)."""
        self.tokens.extend(int(t) for t in tokens)
        self._check()
        if isinstance(self.layers, RecurrentCache):
            self.layers.checkpoint()

    def settle(self, sequence: Sequence[int]) -> None:
        """After a call: hold exactly a prefix of ``sequence`` (prompt + emitted tokens)."""
        held = max(self._held(), default=0)
        if held > len(sequence):
            try:
                trim(self.layers, held - len(sequence))
            except RollbackError:  # recurrent state past the sequence: exact or none
                self.reset()
                return
            held = len(sequence)
        self.tokens = [int(t) for t in sequence[:held]]
        self._check()

    def fork(self, n: int) -> "PromptCache | None":
        """A cache of the first ``n`` cached tokens sharing this one's arrays
        (docs/caches.md#the-prompt-cache)."""
        self._check()
        if not 0 < n <= len(self.tokens):
            raise ValueError(f"cannot fork {n} of {len(self.tokens)} cached tokens")
        if isinstance(self.layers, RecurrentCache):
            return None  # a recurrent state holds no earlier prefix
        new = PromptCache.__new__(PromptCache)
        new.__dict__.update(self.__dict__)
        new.layers = [_restore(type(c).__name__, _shape(c), _held(c)) for c in self.layers]
        new.tokens = list(self.tokens)
        try:
            trim(new.layers, len(self.tokens) - n)
        except RollbackError:
            return None
        del new.tokens[n:]
        return new

    def save(self, path: str | os.PathLike) -> None:
        """Write the cache to ``path`` (safetensors), atomically."""
        self._check()
        if isinstance(self.layers, RecurrentCache):
            raise ValueError("saving the prompt cache of a model with recurrent layers is not "
                             "supported yet: keep the PromptCache object in memory instead")
        if not self.tokens:
            raise ValueError("the prompt cache is empty: run a prompt through it before saving")
        arrays = dict(tree_flatten([_held(c) for c in self.layers]))
        meta = {"format": FORMAT, "fingerprint": self.fingerprint, "tokens": self.tokens,
                "kinds": [type(c).__name__ for c in self.layers],
                "shape": [_shape(c) for c in self.layers],
                "max_draft_tokens": self.max_draft_tokens, "kv_bits": self.kv_bits,
                "kv_group_size": self.kv_group_size}

        def write(f: Any) -> None:
            mx.save_safetensors(f, arrays, {"specdec": json.dumps(meta)})

        atomic_write(str(path), write)


def _held(c: Any) -> list:
    """The keys/values a layer holds, cut to its valid positions (buffers keep slack)."""
    if isinstance(c, WindowKVCache):
        return list(c.state)
    n = c.offset
    cut = (lambda a: a[..., :n, :]) if isinstance(c, KVCache) else (lambda t: [x[..., :n, :] for x in t])
    return [cut(c.keys), cut(c.values)]


def _shape(c: Any) -> list[int]:
    if isinstance(c, WindowKVCache):
        return [c.window, c.slack, c.start, c.offset]
    if isinstance(c, QuantizedKVCache):
        return [c.offset, c.group_size, c.bits]
    return [c.offset]


def _restore(kind: str, shape: list[int], held: list) -> Any:
    if kind == "WindowKVCache":
        w = WindowKVCache(shape[0], shape[1])
        w.start, w.offset = shape[2], shape[3]
        w.keys, w.values = held
        return w
    if kind == "QuantizedKVCache":
        q = QuantizedKVCache(group_size=shape[1], bits=shape[2])
        # mlx-lm's __init__ sets keys/values = None unannotated: mypy infers them as None
        q.keys, q.values, q.offset = tuple(held[0]), tuple(held[1]), shape[0]  # type: ignore[assignment]
        return q
    if kind == "KVCache":
        c = KVCache()
        c.keys, c.values, c.offset = held[0], held[1], shape[0]
        return c
    raise ValueError(f"unknown cache layer kind {kind!r}")


def make_prompt_cache(model: Model, *, max_draft_tokens: int = 32, kv_bits: int | None = None,
                      kv_group_size: int = 64) -> PromptCache:
    """An empty prompt cache for ``model`` (docs/caches.md#the-prompt-cache)."""
    return PromptCache(model, max_draft_tokens=max_draft_tokens, kv_bits=kv_bits,
                       kv_group_size=kv_group_size)


def load_prompt_cache(path: str | os.PathLike, model: Model) -> PromptCache:
    """A prompt cache saved by ``PromptCache.save``, for ``model`` (refused for another)."""
    try:
        # with return_metadata, mx.load gives (arrays, metadata) (typed as any of its returns)
        arrays, info = cast("tuple[dict[str, mx.array], dict[str, str]]",
                            mx.load(str(path), format="safetensors", return_metadata=True))
    except Exception as e:  # noqa: BLE001 (mlx raises plain exceptions for bad files)
        raise ValueError(f"{path} is not a specdec prompt cache file: {e}") from None
    try:
        meta = json.loads(info["specdec"])
        assert meta["format"] == FORMAT
    except (KeyError, ValueError, AssertionError):
        raise ValueError(f"{path} is not a specdec prompt cache file") from None
    pc = PromptCache(model, max_draft_tokens=meta["max_draft_tokens"], kv_bits=meta["kv_bits"],
                     kv_group_size=meta["kv_group_size"])
    if meta["fingerprint"] != pc.fingerprint:
        raise ValueError(f"{path} holds a prompt cache of another model (or dtype): "
                         "it cannot be used with this one")
    held = tree_unflatten(list(arrays.items()))
    layers = [_restore(kind, shape, h) for kind, shape, h in zip(meta["kinds"], meta["shape"], held)]
    if len(layers) != len(pc.layers) or [type(c) for c in layers] != [type(c) for c in pc.layers]:
        raise ValueError(f"{path} holds other cache layers than this model makes")
    pc.layers, pc.tokens = layers, list(meta["tokens"])
    pc._check()
    return pc


class PrefixStore:
    """Finished requests' caches, for requests that start the same way (docs/caches.md#the-prompt-cache)."""

    def __init__(self, model: Model, max_bytes: int, *, max_draft_tokens: int = 32,
                 kv_bits: int | None = None):
        if max_bytes < 0:
            raise ValueError(f"--prompt-cache-bytes must be >= 0, got {max_bytes}")
        self.model, self.max_bytes = model, max_bytes
        self.max_draft_tokens, self.kv_bits = max_draft_tokens, kv_bits
        self.entries: list[PromptCache] = []  # least recently used first

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def take(self, prompt_ids: Sequence[int], scope: str = "") -> PromptCache:
        """The cache sharing the longest prefix with ``prompt_ids`` among the entries of
        ``scope`` (a tenant's: another scope's prompts are never matched, so their length
        cannot be read from ``cached_tokens``), or a fresh one of that scope."""
        shared = [common_prefix(e.tokens, prompt_ids[:-1]) if e.scope == scope else 0
                  for e in self.entries]
        best = max(range(len(shared)), key=shared.__getitem__, default=None)
        if best is not None and shared[best] > 0:
            entry = self.entries[best]
            mark = entry.checkpoint_at()
            if shared[best] == len(entry.tokens) or (mark is not None and 0 < mark <= shared[best]):
                return self.entries.pop(best)  # a recurrent entry goes back to its checkpoint
            forked = entry.fork(shared[best])
            if forked is not None:
                return forked
        fresh = make_prompt_cache(self.model, max_draft_tokens=self.max_draft_tokens,
                                  kv_bits=self.kv_bits)
        fresh.scope = scope
        return fresh

    def put(self, cache: PromptCache) -> None:
        """Keep ``cache`` (most recently used), evicting the least recent past the budget;
        entries whose whole text ``cache`` starts with are dropped: it covers them."""
        if not cache.tokens:
            return
        self.entries = [e for e in self.entries if e.scope != cache.scope
                        or common_prefix(e.tokens, cache.tokens) < len(e.tokens)]
        self.entries.append(cache)
        while self.entries and self.nbytes > self.max_bytes:
            self.entries.pop(0)
