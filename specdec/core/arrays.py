"""Typed reads of mlx arrays into Python values.

mlx's ``array.tolist()`` is typed as a union of every nesting depth (scalar, list, list of
lists...), so each caller would cast; these say the shape they expect and check it, so a
wrong shape fails here with its shape rather than as a confusing error downstream.
Tests: tests/core/test_arrays.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx

if TYPE_CHECKING:
    from .model import Model


def _need(a: mx.array, ndim: int) -> None:
    if a.ndim != ndim:
        raise ValueError(f"expected a {ndim}-D array, got shape {tuple(a.shape)}")


def ints(a: mx.array) -> list[int]:
    """A 1-D integer (or bool) array as a list of ints (one sync)."""
    _need(a, 1)
    return cast("list[int]", a.tolist())


def floats(a: mx.array) -> list[float]:
    """A 1-D array as a list of floats (one sync)."""
    _need(a, 1)
    return cast("list[float]", a.tolist())


def int_rows(a: mx.array) -> list[list[int]]:
    """A 2-D integer (or bool) array as a list of rows (one sync)."""
    _need(a, 2)
    return cast("list[list[int]]", a.tolist())


def scalar_int(a: mx.array) -> int:
    """A one-element array as an int (one sync); ``item()`` is typed as any scalar."""
    if a.size != 1:
        raise ValueError(f"expected one element, got shape {tuple(a.shape)}")
    return int(cast("int", a.item()))


def scalar_float(a: mx.array) -> float:
    """A one-element array as a float (one sync)."""
    if a.size != 1:
        raise ValueError(f"expected one element, got shape {tuple(a.shape)}")
    return float(cast("float", a.item()))


def float_rows(a: mx.array) -> list[list[float]]:
    """A 2-D array as a list of rows of floats (one sync)."""
    _need(a, 2)
    return cast("list[list[float]]", a.tolist())


def nested(a: mx.array) -> list[Any]:
    """An array of any rank >= 1 as nested lists (one sync): rows of mixed kinds read by
    position, where a per-rank type would say no more."""
    if a.ndim < 1:
        raise ValueError("expected an array of rank >= 1, got a scalar")
    return cast("list[Any]", a.tolist())


def load_arrays(path: str) -> dict[str, mx.array]:
    """The named arrays of a .safetensors/.npz file; ``mx.load`` is typed as any of its
    return shapes, and without ``return_metadata`` it is this one."""
    loaded = mx.load(path)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} holds one unnamed array, not named weights; write it with "
                         "mx.save_safetensors.")
    return loaded


def flat_weights(model: Model) -> list[tuple[str, mx.array]]:
    """The model's weights as (dotted name, array) pairs, in mlx's order."""
    return flat_tree(model.parameters())


def flat_tree(tree: Any) -> list[tuple[str, mx.array]]:
    """An mlx tree (``module.parameters()``, a cache's state) as (dotted name, leaf) pairs."""
    from mlx.utils import tree_flatten  # typed as list-or-dict: the default gives the list

    return cast("list[tuple[str, mx.array]]", tree_flatten(tree))
