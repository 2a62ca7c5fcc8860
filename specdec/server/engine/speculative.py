"""How a request's ``speculative`` options (``spec.options.SpeculativeOptions``, this server's
extension of every wire) apply to the server's ``DraftSpec``.

Contract: ``merge_speculative`` applies them to the server's default
``DraftSpec``, whose own checks raise a ``ValueError`` naming the ``speculative`` field;
``refuse_unloaded`` refuses a spec that needs what the server did not load.
Tests: tests/drafters/test_spec.py, tests/server/test_schemas.py."""

from __future__ import annotations

import re
from typing import Any

from ...drafters.spec import DraftSpec
from .spec.options import SpeculativeOptions


def refuse_unloaded(spec: DraftSpec, worker: Any) -> None:
    """``ValueError`` when ``spec`` needs what the ``worker`` did not load (``draft``: a draft
    model, ``mtp``: an MTP block; read only when named)."""
    if spec.uses("model") and worker.draft is None:
        raise ValueError("draft_type 'model' needs a server started with --draft-model")
    if spec.uses("mtp") and worker.mtp is None:
        raise ValueError("draft_type 'mtp' needs a server started with --draft-type mtp")


def merge_speculative(default: DraftSpec, opts: SpeculativeOptions | None) -> DraftSpec:
    """The spec one request runs with: the server's default + the request's overrides
    (``ValueError`` naming the ``speculative`` field when the combination is invalid)."""
    if opts is None:
        return default
    try:
        return default.with_options(**opts.model_dump())
    except ValueError as e:
        msg = re.sub(r"--([a-z-]+)", lambda m: "speculative." + m.group(1).replace("-", "_"), str(e))
        raise ValueError(msg) from None
