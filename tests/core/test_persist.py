"""``specdec.core.persist``: atomic writes leave the old file or the whole new one, and
``read_npz`` round-trips a versioned file and refuses others with what to do."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from specdec.core.persist import atomic_write, read_npz


def save(path, fmt="table", version=1, **arrays):
    def write(f):
        np.savez(f, meta=np.array(json.dumps({"format": fmt, "version": version})), **arrays)
    atomic_write(str(path), write)


def test_read_npz_round_trips_meta_and_arrays(tmp_path):
    path = tmp_path / "t.npz"
    a, b = np.arange(6, dtype=np.int32).reshape(2, 3), np.array([0.5, 1.5])
    save(path, a=a, b=b)
    meta, arrays = read_npz(str(path), "table", "table", 1, ("a", "b"))
    assert meta == {"format": "table", "version": 1}
    assert arrays["a"].tolist() == a.tolist() and arrays["b"].tolist() == b.tolist()
    assert os.listdir(tmp_path) == ["t.npz"]  # no temp file left behind


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "t.bin"
    atomic_write(str(path), lambda f: f.write(b"old"))

    def broken(f):
        f.write(b"half of the new")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(str(path), broken)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["t.bin"]
    atomic_write(str(path), lambda f: f.write(b"new"))
    assert path.read_bytes() == b"new"


def test_another_format_or_version_says_what_this_specdec_reads(tmp_path):
    path = tmp_path / "t.npz"
    save(path, fmt="table", version=2, a=np.zeros(1))
    with pytest.raises(ValueError, match=r"format/version \('table', 2\); this specdec reads 'table' "
                                         r"version 1\. Rebuild the ngram table"):
        read_npz(str(path), "ngram table", "table", 1, ("a",))
    save(path, fmt="other", version=1, a=np.zeros(1))
    with pytest.raises(ValueError, match="format/version"):
        read_npz(str(path), "ngram table", "table", 1, ("a",))


@pytest.mark.parametrize("content", [b"", b"not a zip file", None])
def test_unreadable_data_or_a_missing_array_names_the_file(tmp_path, content):
    path = tmp_path / "t.npz"
    if content is None:
        save(path, a=np.zeros(1))  # readable, but without the array "b"
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{path} is not a readable ngram table file .*delete or rebuild"):
        read_npz(str(path), "ngram table", "table", 1, ("a", "b"))


def test_a_missing_file_is_unreadable_too(tmp_path):
    with pytest.raises(ValueError, match="is not a readable"):
        read_npz(str(tmp_path / "absent.npz"), "table", "table", 1, ())
