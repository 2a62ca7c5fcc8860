"""Backend facts: which compute device mlx uses, which dtype weights run in, and OpenBLAS.

Contract: ``openblas_path()`` finds OpenBLAS on Linux without importing mlx;
``ensure_openblas(argv)`` re-executes with it in ``LD_PRELOAD`` (a faster BLAS wins only
when preloaded) or warns once, and returns only when no re-exec happened; on the CPU backend
``default_dtype()`` is float32, on Metal/CUDA ``None`` (keep the weights as loaded).
Tests: tests/test_backend.py, tests/test_cli.py (the preload), tests/conftest.py. Details:
docs/loading.md#backend."""

from __future__ import annotations

import os
import sys

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
INSTALL_HINT = (
    "specdec: OpenBLAS not found; mlx on Linux CPU falls back to a reference BLAS and runs "
    "several times slower. Install it with: sudo apt-get install libopenblas0-pthread"
)
_REEXEC_MARK = "SPECDEC_BLAS_REEXEC"


def openblas_path() -> str | None:
    """Path of an installed OpenBLAS library (Linux only), or None."""
    if not sys.platform.startswith("linux"):
        return None
    override = os.environ.get("SPECDEC_OPENBLAS")
    if override:
        return override if os.path.exists(override) else None
    return next((p for p in OPENBLAS_CANDIDATES if os.path.exists(p)), None)


def openblas_preloaded() -> bool:
    return "openblas" in os.environ.get("LD_PRELOAD", "")


def preload_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default: os.environ) with OpenBLAS added to LD_PRELOAD if found."""
    env = dict(os.environ if env is None else env)
    lib = openblas_path()
    if lib and "openblas" not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    return env


def ensure_openblas(argv: list[str]) -> None:
    """Re-exec ``argv`` under ``python -m specdec`` with OpenBLAS preloaded when useful."""
    if not sys.platform.startswith("linux") or openblas_preloaded():
        return
    if os.environ.get("SPECDEC_NO_OPENBLAS") or os.environ.get(_REEXEC_MARK):
        return
    if "mlx" in sys.modules:  # too late to preload; say so rather than pretend
        print("specdec: mlx already loaded; OpenBLAS cannot be preloaded", file=sys.stderr)
        return
    if openblas_path() is None:
        print(INSTALL_HINT, file=sys.stderr)
        return
    env = preload_env()
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "specdec", *argv], env)


def on_cpu() -> bool:
    import mlx.core as mx  # here: this module preloads OpenBLAS, so it must not load mlx itself

    return mx.default_device() == mx.cpu


def default_dtype() -> str | None:
    """float32 on CPU; None (keep the checkpoint's quantization/dtype) on a GPU backend."""
    return "float32" if on_cpu() else None
