"""Placeholder: this surface is being written."""

from __future__ import annotations

from typing import Any


def register(app: Any, api: Any) -> None:
    """Add this surface's routes to ``app`` (none yet)."""
