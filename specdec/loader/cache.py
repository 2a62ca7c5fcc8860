"""On-disk cache for assembled GGUF files and converted mlx-lm model directories.

Contract: ``cache_root()`` is ``$SPECDEC_CACHE_DIR`` or ``~/.cache/specdec``;
``source_key(path, version)`` changes with the source or converter, so stale conversions are
never reused; ``atomic_dir``/``atomic_file`` publish by one rename (a reader sees nothing or
a complete result; the first finisher wins). Nothing here imports mlx.
Tests: tests/loader/test_cache.py, tests/loader/test_api.py, tests/test_calibrate.py."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import ModelLoadError

CACHE_ENV = "SPECDEC_CACHE_DIR"


def cache_root() -> Path:
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specdec").expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelLoadError(
            f"Cannot create the specdec cache directory {root}: {exc}. "
            f"Point ${CACHE_ENV} at a writable directory."
        ) from exc
    return root


def source_key(path: Path, version: int) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|v{version}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; the cache is ordinary data
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:
            # rename onto an existing non-empty dir fails: a concurrent writer won the
            # race, and its directory is just as complete as ours.
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(final: Path) -> Iterator[Path]:
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".tmp-{final.name}-", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
