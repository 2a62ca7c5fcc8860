"""The server's shared speculative memory: one ngram-mod table and one suffix history.

Contract: ``SharedMemory.open`` loads both files or starts empty when missing (an unusable
file is an error, never silently replaced); ``commit(tokens)`` adds a finished request,
called only by the inference thread; ``save()`` writes what changed, each file staged,
fsynced and ``os.replace``d, so a kill leaves the old or the new file, never a torn one.
Test hook: ``SPECDEC_SERVE_SAVE_PAUSE_S``. Tests: tests/server/test_memory.py.
Details: docs/batching-and-server.md#shared-drafter-memory."""

from __future__ import annotations

import glob
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...drafters.ngram_mod import NgramModTable, tokenizer_fingerprint
from ...drafters.spec import DraftSpec, ngram_mod_table
from ...core.persist import fsync_dir
from ...drafters.suffix import SuffixHistory

log = logging.getLogger("specdec.server")
PAUSE_ENV = "SPECDEC_SERVE_SAVE_PAUSE_S"


def staged_replace(path: str, write: Callable[[str], None]) -> None:
    """``write(staging_path)`` must leave a complete, fsynced file there; it then
    replaces ``path`` atomically (docs/batching-and-server.md#shared-drafter-memory)."""
    directory, base = os.path.split(os.path.abspath(path))
    staging = os.path.join(directory, f".{base}.staging")
    write(staging)
    pause = float(os.environ.get(PAUSE_ENV) or 0)
    if pause > 0:
        log.warning("test hook %s: pausing %.1fs before replacing %s", PAUSE_ENV, pause, path)
        time.sleep(pause)
    os.replace(staging, path)
    fsync_dir(directory)


def _remove_stale_staging(path: str) -> None:
    directory, base = os.path.split(os.path.abspath(path))
    # ".<base>.staging" and the writers' own temp files ("..<base>.staging.*.tmp")
    for stale in glob.glob(os.path.join(directory, f".*{glob.escape(base)}*.staging*")):
        log.warning("removing %s, left by a save that was killed", stale)
        os.unlink(stale)


class SharedMemory:
    """The ngram-mod table and suffix history every request drafts from: ``open``,
    ``commit`` (inference thread only), ``save`` (atomic per file)."""

    def __init__(self, table: NgramModTable, history: SuffixHistory, fingerprint: str,
                 path: str | None):
        self.table, self.history, self.fingerprint, self.path = table, history, fingerprint, path
        self.dirty = False
        self.saves = 0
        self.last_save: float | None = None
        self.loaded = {"table_slots": table.used, "history_tokens": history.tokens}

    @classmethod
    def open(cls, path: str | None, tokenizer: Any, spec: DraftSpec) -> SharedMemory:
        """The memory ``spec`` shapes (table size and n, history tokens), loaded from
        ``path`` and ``path.suffix`` where those exist."""
        fp, history_tokens = tokenizer_fingerprint(tokenizer), spec.suffix_history
        table = ngram_mod_table(replace(spec, ngram_mod_file=None), tokenizer)
        history = SuffixHistory(history_tokens)
        if path is None:
            return cls(table, history, fp, None)
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise ValueError(f"--memory-file {path}: directory {directory} does not exist or "
                             "is not writable; create it or choose another path")
        _remove_stale_staging(path)
        try:
            if os.path.exists(path):
                table = ngram_mod_table(replace(spec, ngram_mod_file=path), tokenizer)
            if os.path.exists(cls.history_path(path)):
                history = SuffixHistory.load(cls.history_path(path), tokenizer_fingerprint=fp,
                                             max_tokens=history_tokens)
        except ValueError as e:
            raise ValueError(f"--memory-file {path}: {e} (or pass another --memory-file)") from e
        return cls(table, history, fp, path)

    @staticmethod
    def history_path(path: str) -> str:
        return path + ".suffix"

    def commit(self, tokens: list[int]) -> None:
        if len(tokens) > self.table.n:
            self.table.insert(tokens)
        self.history.add(tokens)
        self.dirty = True

    def save(self) -> bool:
        """Write both files if anything changed; returns whether it wrote."""
        if self.path is None or not self.dirty:
            return False
        self.dirty = False  # commits during the save (none: same thread) would re-dirty it
        fp = self.fingerprint
        staged_replace(self.path, lambda p: self.table.save(p, tokenizer_fingerprint=fp))
        staged_replace(self.history_path(self.path),
                       lambda p: self.history.save(p, tokenizer_fingerprint=fp))
        self.saves += 1
        self.last_save = time.time()
        return True

    def info(self) -> dict[str, Any]:
        return {"file": self.path, "table_size": self.table.size, "table_n": self.table.n,
                "table_slots_used": self.table.used,
                "history_documents": len(self.history.docs), "history_tokens": self.history.tokens,
                "loaded": self.loaded, "saves": self.saves, "last_save": self.last_save}
