"""The model as the engine calls it: token ids through a per-layer cache to logits.

mlx-lm's model classes are it, and so is ``distributed.LeaderModel`` (rank 0 of a sharded
target); nothing here runs a model, it names the seam between the engine and mlx-lm.
Tests: tests/core/test_model.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: this module stays importable without mlx
    import mlx.core as mx


@runtime_checkable
class Model(Protocol):
    """Logits (B, L, V) of token ids (B, L) fed through ``cache`` (one mlx-lm cache per layer,
    ``layers`` long); what specdec reads of an ``mlx.nn.Module`` besides, listed here."""

    def __call__(self, inputs: mx.array, cache: list[Any] | None = None) -> mx.array: ...

    @property
    def layers(self) -> list[Any]: ...

    def parameters(self) -> dict[str, Any]:
        """The weights as mlx's nested dict (a fingerprint reads their dtype)."""
        ...

    def modules(self) -> list[Any]:
        """Every nn.Module below it (a hybrid's replay swaps the cache-taking ones)."""
        ...
