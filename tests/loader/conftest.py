"""The loader tests' shared fixture: a private conversion cache."""

import pytest


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(cache))
    return cache
