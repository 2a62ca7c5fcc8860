"""``specdec.loader.convert``: a conversion is cached, reused, keyed on its source, and a
stale one pruned (the synthetic GGUF of tests/loader/test_api.py)."""

from __future__ import annotations

import os

from gguf import GGMLQuantizationType as Q

from specdec.loader import convert as loader_convert
from specdec.loader import load

from .test_api import write_tiny_gguf


def test_conversion_is_cached_and_keyed_on_the_source(tmp_path, tmp_cache):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", qtypes=(Q.Q8_0,))
    before = loader_convert.conversion_count()
    load(str(path))
    assert loader_convert.conversion_count() == before + 1
    out = loader_convert.converted_dir(path)
    assert out.parent.parent == tmp_cache and (out / "specdec.json").is_file()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".tmp")]

    load(str(path))
    assert loader_convert.conversion_count() == before + 1  # reused, not reconverted

    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    load(str(path))  # a changed source is a new cache key
    assert loader_convert.conversion_count() == before + 2
    assert not out.exists()  # the stale conversion was pruned
    assert (loader_convert.converted_dir(path) / "specdec.json").is_file()
