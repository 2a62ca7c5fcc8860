"""``specdec.backend``: finding OpenBLAS (an override wins, a missing one is None), the
preload environment, and the default dtype on this backend."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from specdec import backend

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux only")


@linux
def test_an_override_wins_and_a_missing_override_finds_nothing(tmp_path, monkeypatch):
    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"")
    monkeypatch.setenv("SPECDEC_OPENBLAS", str(lib))
    assert backend.openblas_path() == str(lib)
    monkeypatch.setenv("SPECDEC_OPENBLAS", str(tmp_path / "absent.so"))
    assert backend.openblas_path() is None


@linux
def test_preload_env_adds_openblas_once_and_keeps_other_preloads(tmp_path, monkeypatch):
    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"")
    monkeypatch.setenv("SPECDEC_OPENBLAS", str(lib))
    env = backend.preload_env({"LD_PRELOAD": "/x/libother.so", "A": "1"})
    assert env == {"LD_PRELOAD": f"{lib}:/x/libother.so", "A": "1"}
    assert backend.preload_env(env) == env  # already there: unchanged
    assert backend.preload_env({})["LD_PRELOAD"] == str(lib)


def test_ensure_openblas_returns_when_mlx_is_already_loaded(monkeypatch, capsys):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("SPECDEC_NO_OPENBLAS", raising=False)
    monkeypatch.delenv("SPECDEC_BLAS_REEXEC", raising=False)
    backend.ensure_openblas(["generate"])  # mlx is imported here: no re-exec, a warning
    if sys.platform.startswith("linux"):
        assert "mlx already loaded; OpenBLAS cannot be preloaded" in capsys.readouterr().err


def test_default_dtype_follows_the_device():
    assert backend.default_dtype() == ("float32" if mx.default_device() == mx.cpu else None)
    assert backend.on_cpu() == (mx.default_device() == mx.cpu)
