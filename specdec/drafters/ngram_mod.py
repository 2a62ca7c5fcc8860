"""ngram-mod: a rolling-hash n-gram memory shared across requests.

Contract: ``NgramModTable(size, n)`` is a fixed-size lossy map hash(n tokens) -> next token
(collisions overwrite; a wrong guess costs only a rejected draft); ``draft`` walks it hash by
hash, ``insert`` records a stretch; writes hold a lock, reads take none and can only yield a
worse draft. ``NgramModDrafter`` inserts prompts and generated text in chunks and resets the
table on a streak of poor acceptance. ``save`` is atomic; ``load`` refuses another
tokenizer's file. Tests: tests/drafters/test_ngram_mod.py. Defaults by measurement: docs/drafters.md#the-shared-n-gram-table-ngram-mod."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import weakref
from typing import Any, Iterable, Sequence

import numpy as np

from .base import Drafter, Proposal
from ..core.persist import atomic_write, read_npz

MULT = 6364136223846793005  # Knuth's MMIX LCG multiplier, as in the published ngram-mod
_MASK = (1 << 64) - 1
EMPTY = -1
DEFAULT_SIZE = 1 << 18  # 1 MiB; measured: docs/drafters.md#the-shared-n-gram-table-ngram-mod
DEFAULT_N = 4
DEFAULT_GATE = 32
DEFAULT_RESET_BELOW = 0.5  # a proposal accepted below this fraction counts as "low"
DEFAULT_RESET_STREAK = 3  # this many low proposals in a row reset the table
FORMAT = "specdec-ngram-mod"
FORMAT_VERSION = 1


def ngram_hash(tokens: Sequence[int]) -> int:
    """Polynomial hash of a window: ``sum((t_i + 1) * MULT**(len-1-i)) mod 2**64``.

    ``+ 1`` keeps token 0 from vanishing from the sum. Worked example::

        ngram_hash([])     == 0
        ngram_hash([0])    == 1
        ngram_hash([0, 0]) == MULT + 1 == 6364136223846793006
    """
    h = 0
    for t in tokens:
        h = (h * MULT + int(t) + 1) & _MASK
    return h


def roll_hash(h: int, old: int, new: int, top_power: int) -> int:
    """Slide a window's hash by one token: drop ``old`` (the oldest), append ``new``.

    ``top_power`` is ``pow(MULT, n - 1, 2**64)``. For any window ``w`` of length n,
    ``roll_hash(ngram_hash(w), w[0], x, p) == ngram_hash(w[1:] + [x])``.
    """
    return ((h - (old + 1) * top_power) * MULT + new + 1) & _MASK


def slot_of(h: int, size: int) -> int:
    """Slot of a hash. The low bits of a polynomial hash mod 2**64 depend only on the
    tokens' low bits, so the high half is folded in before reducing (which makes
    power-of-two sizes, where ``%`` is a mask, as good as any)."""
    return ((h ^ (h >> 32)) & _MASK) % size


def window_slots(tokens: Sequence[int] | np.ndarray, n: int, size: int) -> np.ndarray:
    """``slot_of(ngram_hash(window), size)`` of every length-n window of ``tokens`` (ids
    >= 0), vectorised: n passes of uint64 array arithmetic, which wraps at 64 bits exactly
    like the ``& _MASK`` above."""
    tokens = np.asarray(tokens).astype(np.uint64)
    m = len(tokens) - n + 1
    h = np.zeros(m, dtype=np.uint64)
    mult, one = np.uint64(MULT), np.uint64(1)
    for i in range(n):
        h = h * mult + tokens[i : i + m] + one
    return (h ^ (h >> np.uint64(32))) % np.uint64(size)


def draft_walk(
    slots: np.ndarray, n: int, context: Sequence[int], k: int, eos: Iterable[int] = ()
) -> list[int]:
    """The draft: follow the table from the last ``n`` tokens of ``context``.

    ``slots[slot_of(hash(window))]`` is the guess after ``window``; the guess joins the
    window (the oldest token leaves) and the walk repeats, stopping at an EMPTY slot, at
    ``k`` tokens, or after an EOS token. Worked example (n=2, a table holding
    ``[5, 6] -> 7`` and ``[6, 7] -> 8``, nothing for ``[7, 8]``)::

        draft_walk(slots, 2, [1, 5, 6], k=4)          -> [7, 8]   (stops: [7, 8] empty)
        draft_walk(slots, 2, [1, 5, 6], k=1)          -> [7]      (stops at k)
        draft_walk(slots, 2, [1, 5, 6], k=4, eos={7}) -> [7]      (EOS ends generation)
        draft_walk(slots, 2, [6], k=4)                -> []       (shorter than n)
    """
    if k <= 0 or len(context) < n:
        return []
    eos = frozenset(eos)
    size = len(slots)
    window = [int(t) for t in context[len(context) - n :]]
    h, top = ngram_hash(window), pow(MULT, n - 1, 1 << 64)
    draft: list[int] = []
    while len(draft) < k:
        tok = int(slots[slot_of(h, size)])
        if tok < 0:
            break
        draft.append(tok)
        if tok in eos:
            break
        h = roll_hash(h, window[len(draft) - 1], tok, top)
        window.append(tok)  # window[len(draft) - 1] is the oldest token of the next step
    return draft


class NgramModTable:
    """The shared memory; contract: docs/drafters.md#the-shared-n-gram-table-ngram-mod."""

    def __init__(
        self,
        size: int = DEFAULT_SIZE,
        n: int = DEFAULT_N,
        *,
        tokenizer_fingerprint: str | None = None,
    ):
        if int(size) < 1 or int(n) < 1:
            raise ValueError(f"need size >= 1 and n >= 1, got size={size}, n={n}")
        self.size, self.n = int(size), int(n)
        self.fingerprint = tokenizer_fingerprint
        self._slots = np.full(self.size, EMPTY, dtype=np.int32)
        self._used = 0  # slots not EMPTY, kept by the writers so occupancy() is O(1)
        self._lock = threading.Lock()
        self.resets = 0

    def draft(self, context: Sequence[int], k: int, eos: Iterable[int] = ()) -> list[int]:
        return draft_walk(self._slots, self.n, context, k, eos)

    def insert(self, tokens: Sequence[int], start: int = 0, stop: int | None = None) -> int:
        """Insert entries whose next token is ``tokens[j]``, ``max(start, n) <= j < stop``.

        Returns the number of entries offered (slots shared within the batch count once
        per entry)."""
        stop = len(tokens) if stop is None else min(stop, len(tokens))
        start = max(start, self.n)
        if stop <= start:
            return 0
        arr = np.asarray(tokens[start - self.n : stop], dtype=np.int64)
        if arr.min() < 0 or arr.max() > np.iinfo(np.int32).max:
            raise ValueError("token ids must lie in [0, 2**31)")
        nxt = arr[self.n :].astype(np.int32)
        slots = window_slots(arr[:-1], self.n, self.size)
        # Fancy assignment leaves the winner among repeated slots unspecified: keep the
        # last occurrence explicitly so that "later overwrites earlier" holds in a batch.
        rev = slots[::-1]
        _, first_in_rev = np.unique(rev, return_index=True)
        keep = len(slots) - 1 - first_in_rev
        slots, nxt = slots[keep].astype(np.intp), nxt[keep]
        with self._lock:
            self._used += int(np.count_nonzero(self._slots[slots] == EMPTY))
            self._slots[slots] = nxt
        return stop - start

    def reset(self) -> None:
        """Forget everything (in place, so every sharer sees the reset)."""
        with self._lock:
            self._slots.fill(EMPTY)
            self._used = 0
            self.resets += 1

    def occupancy(self) -> float:
        """Fraction of slots in use."""
        return self._used / self.size

    @property
    def used(self) -> int:
        return self._used

    def snapshot(self) -> np.ndarray:
        """A copy of the slot array (EMPTY = free), taken under the write lock."""
        with self._lock:
            return self._slots.copy()

    def save(self, path: str | os.PathLike, *, tokenizer_fingerprint: str | None = None) -> None:
        """Write the table atomically to ``path`` (docs/drafters.md#the-shared-n-gram-table-ngram-mod)."""
        fp = tokenizer_fingerprint or self.fingerprint
        if not fp:
            raise ValueError(
                "saving needs the tokenizer fingerprint (tokenizer_fingerprint(tokenizer)): "
                "pass it to NgramModTable(...) or to save(); without it a later load "
                "could not tell whether the token ids still mean the same thing"
            )
        with self._lock:  # a consistent snapshot; the slow file work happens unlocked
            used = np.flatnonzero(self._slots != EMPTY)
            tokens = self._slots[used]
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "n": self.n, "size": self.size,
                "tokenizer_fingerprint": fp}
        atomic_write(os.fspath(path), lambda f: np.savez(
            f, meta=np.array(json.dumps(meta)), used=used.astype(np.int64), tokens=tokens))

    @classmethod
    def load(cls, path: str | os.PathLike, *, tokenizer_fingerprint: str) -> "NgramModTable":
        """Read a table saved by ``save``; refuses another tokenizer's table."""
        path = os.fspath(path)
        meta, used, tokens = _read_table_file(path)
        _check_fingerprint(path, meta["tokenizer_fingerprint"], tokenizer_fingerprint)
        table = cls(meta["size"], meta["n"], tokenizer_fingerprint=tokenizer_fingerprint)
        bad_slots = len(used) and (used.min() < 0 or used.max() >= table.size)
        if len(used) != len(tokens) or bad_slots or (len(tokens) and tokens.min() < 0):
            raise ValueError(f"{path}: slot data inconsistent with size {table.size}; rebuild it")
        table._slots[used] = tokens
        table._used = int(np.count_nonzero(table._slots != EMPTY))
        return table


def _read_table_file(path: str) -> tuple[dict, np.ndarray, np.ndarray]:
    meta, arrays = read_npz(path, "ngram-mod table", FORMAT, FORMAT_VERSION, ("used", "tokens"))
    if not all(isinstance(meta.get(k), int) for k in ("n", "size")) or not isinstance(
        meta.get("tokenizer_fingerprint"), str
    ):
        raise ValueError(f"{path}: header lacks n, size or tokenizer_fingerprint; rebuild it")
    return meta, arrays["used"], arrays["tokens"]


def _check_fingerprint(path: str, stored: str, given: str) -> None:
    if not given:
        raise ValueError(
            "NgramModTable.load needs tokenizer_fingerprint=tokenizer_fingerprint(tokenizer)"
        )
    if stored != given:
        raise ValueError(
            f"{path} was built with tokenizer fingerprint {stored}, but this tokenizer's "
            f"fingerprint is {given}: token ids differ, so its n-grams would be wrong. "
            "Use a table saved with this tokenizer, or start from an empty NgramModTable."
        )


# tokenizer -> (vocabulary size, fingerprint) while the tokenizer lives: hashing a vocabulary
# costs ~0.3 CPU s (SmolLM2's 49k tokens; Qwen's 151k, ~1 s), which a server start paid four
# times and a library call drafting with ngram-mod once per request
_FINGERPRINTS: weakref.WeakKeyDictionary[Any, tuple[int, str]] = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A stable hash of the vocabulary (every token string -> id pair, sorted).

    Works on mlx-lm's ``TokenizerWrapper`` (it forwards ``get_vocab``), Hugging Face
    tokenizers and ``tokenizers.Tokenizer``. Equal fingerprints mean equal token ids, which
    is what a table's n-grams depend on; merges and normalisation do not enter it. Hashed
    once per tokenizer object and vocabulary size (a token added since: hashed again).
    Tests: tests/drafters/test_ngram_mod.py, tests/test_resources.py.
    """
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if get_vocab is None:
        raise TypeError(f"{type(tokenizer).__name__} has no get_vocab(); pass a tokenizer")
    size = _vocab_size(tokenizer)
    try:
        known = _FINGERPRINTS.get(tokenizer)
    except TypeError:  # not weakly referenceable: hashed at every call, as before
        known = None
    if known is not None and size is not None and known[0] == size:
        return known[1]
    pairs = sorted((str(tok), int(i)) for tok, i in get_vocab().items())
    blob = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    fp = "vocab-sha256:" + hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()
    if size is not None:
        try:
            _FINGERPRINTS[tokenizer] = (size, fp)
        except TypeError:
            pass
    return fp


def _vocab_size(tokenizer: Any) -> int | None:
    """The vocabulary's size with its added tokens, read without building the vocabulary
    (None: unknown, so nothing is remembered)."""
    inner = getattr(tokenizer, "_tokenizer", tokenizer)  # mlx-lm's wrapper holds the HF one
    counted = getattr(inner, "get_vocab_size", None)  # tokenizers.Tokenizer
    if counted is not None:
        return int(counted(with_added_tokens=True))
    return len(inner) if hasattr(inner, "__len__") else None


class NgramModDrafter(Drafter):
    """Drafts from a shared ``NgramModTable`` and feeds it.

    Per-request state only: the tokens seen, ``i_last`` (entries with next-token index
    below it are in the table) and the low-acceptance streak. Many drafters, one per
    request or per thread, may share one table.
    """

    name = "ngram-mod"

    def __init__(
        self,
        table: NgramModTable,
        *,
        n: int | None = None,
        eos: Iterable[int] = (),
        gate: int = DEFAULT_GATE,
        reset_below: float = DEFAULT_RESET_BELOW,
        reset_streak: int | None = DEFAULT_RESET_STREAK,
    ):
        if n is not None and n != table.n:
            raise ValueError(f"drafter n={n} but the table hashes {table.n}-grams; they must match")
        if gate < 0:
            raise ValueError(f"gate must be >= 0, got {gate}")
        if reset_streak is not None and reset_streak < 1:
            raise ValueError(f"reset_streak must be >= 1 or None (off), got {reset_streak}")
        self.table, self.n = table, table.n
        self.eos = frozenset(eos)
        self.gate, self.reset_below, self.reset_streak = gate, reset_below, reset_streak
        self._tokens: list[int] = []
        self._i_last = 0
        self._proposed = 0
        self._streak = 0
        self._generation = table.resets  # the table's reset count when we last synced

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._tokens = [int(t) for t in prompt_ids]
        self._streak = self._proposed = 0
        self._reseed()  # the prompt, ungated

    def _sync(self, context: Sequence[int]) -> None:
        self._tokens.extend(int(t) for t in context[len(self._tokens) :])  # the context only grows
        if self._generation != self.table.resets:
            # Someone (this drafter or a sharer) reset the table: put this request's own
            # text back. A reset should drop foreign, misleading entries, not the prompt
            # we are echoing; without this, measured tokens/step fell by ~25 %.
            self._reseed()
        elif self._i_last + self.gate < len(self._tokens):
            # Chunked insertion: one vectorised insert per `gate` tokens instead of a
            # locked write per token; fresh text drafts only once its chunk lands.
            self._flush()

    def _reseed(self) -> None:
        self._generation = self.table.resets  # read first: a reset racing us shows next time
        self.table.insert(self._tokens)
        self._i_last = len(self._tokens)

    def end(self, tokens: Sequence[int]) -> None:
        """The whole request joins the table: the tail under the gate and the last step's
        tokens, which no proposal saw (a short answer's all)."""
        self._sync(tokens)
        self._flush()

    def _flush(self) -> None:
        """Insert everything seen but not yet inserted (the gated tail)."""
        if self._i_last < len(self._tokens):
            self.table.insert(self._tokens, self._i_last, len(self._tokens))
            self._i_last = len(self._tokens)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._sync(context)
        draft = self.table.draft(self._tokens, k, self.eos)
        self._proposed = len(draft)
        return Proposal(draft)

    def observe(self, num_accepted: int) -> None:
        proposed, self._proposed = self._proposed, 0
        if self.reset_streak is None or proposed == 0:
            return  # no draft, no evidence about the table's quality
        if num_accepted / proposed < self.reset_below:
            self._streak += 1
            if self._streak >= self.reset_streak:
                self.table.reset()  # the memory mostly misleads: start it over
                self._streak = 0
        else:
            self._streak = 0
