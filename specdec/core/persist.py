"""Crash-safe files for shared memories (ngram-mod table, suffix history, prompt caches).

Contract:
- ``atomic_write(path, write)`` calls ``write(fileobj)`` on a temp file in the same
  directory, fsyncs it, renames it over ``path`` and fsyncs the directory: readers (and a
  process restarted after a crash at any point) see the old file or the complete new one.
- ``fsync_dir(directory)`` persists a rename (where the filesystem allows it).
- ``read_npz(path, what, fmt, version, names)`` reads an ``np.savez`` file whose ``meta``
  array holds a JSON header with ``format`` and ``version``; it returns ``(meta, {name:
  array})`` or raises ``ValueError`` naming the file, what it should have been and what to
  do, for unreadable data, a missing array or another format/version.
Tests: tests/core/test_persist.py; in use: tests/drafters/test_ngram_mod.py.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from typing import Any

import numpy as np


def fsync_dir(directory: str) -> None:
    try:  # persist the rename itself; not all filesystems allow fsync on a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def atomic_write(path: str, write: Any) -> None:
    """``write(fileobj)`` on a temp file, fsync, rename over ``path``. Rename is atomic only
    within one directory, hence the temp file beside ``path``; the fsync before it keeps the
    rename from outrunning the data."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def read_npz(path: str, what: str, fmt: str, version: int,
             names: tuple[str, ...]) -> tuple[dict, dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {n: z[n] for n in names}
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError, AttributeError, OSError) as e:
        raise ValueError(f"{path} is not a readable {what} file ({e}); delete or rebuild it") from e
    if not isinstance(meta, dict) or (meta.get("format"), meta.get("version")) != (fmt, version):
        got = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else meta
        raise ValueError(f"{path}: format/version {got!r}; this specdec reads {fmt!r} version "
                         f"{version}. Rebuild the {what} (or delete the file).")
    return meta, arrays
