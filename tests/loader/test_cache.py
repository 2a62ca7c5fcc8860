"""``specdec.loader.cache``: the cache root (the environment's, created, or a message saying
what to point where), source keys, and atomic directories / files."""

from __future__ import annotations

import os

import pytest

from specdec.loader.cache import CACHE_ENV, atomic_dir, atomic_file, cache_root, source_key
from specdec.loader.errors import ModelLoadError


def test_the_cache_root_is_the_environments_and_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "a" / "b"))
    assert cache_root() == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "file" / "sub"))
    message = f"Cannot create the specdec cache directory .*Point \\${CACHE_ENV}"
    with pytest.raises(ModelLoadError, match=message):
        cache_root()


def test_a_source_key_changes_with_the_file_and_the_version(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"12345")
    key = source_key(path, 1)
    assert key == source_key(path, 1) and len(key) == 16 and key != source_key(path, 2)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert source_key(path, 1) != key


def test_an_atomic_dir_appears_whole_or_not_at_all(tmp_path):
    final = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(final) as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError("interrupted")
    assert not final.exists() and os.listdir(tmp_path) == []
    with atomic_dir(final) as tmp:
        (tmp / "whole").write_text("x")
    assert os.listdir(final) == ["whole"] and os.listdir(tmp_path) == ["out"]
    with atomic_dir(final) as tmp:  # a concurrent writer's copy is already there: keep it
        (tmp / "other").write_text("y")
    assert os.listdir(final) == ["whole"] and os.listdir(tmp_path) == ["out"]


def test_an_atomic_file_replaces_only_when_complete(tmp_path):
    final = tmp_path / "f.bin"
    with atomic_file(final) as tmp:
        tmp.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_file(final) as tmp:
            tmp.write_bytes(b"new but unfinished")
            raise RuntimeError("interrupted")
    assert final.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]
