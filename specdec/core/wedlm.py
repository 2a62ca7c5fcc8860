"""WeDLM's settings and its commit rule, shared by the lossy decoder (``decode.wedlm``),
the lossless drafter (``drafters.wedlm``) and the loader (``loader.wedlm``).

Invariant: a ``WedlmSettings`` is valid once constructed; ``pick`` fills at least one mask
per call. Tests: tests/core/test_wedlm.py, tests/decode/test_wedlm.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import mlx.core as mx

from .model import Model

# The seed's (and Tencent's engine's) defaults: a 16-slot window, entropy threshold 0.3,
# a penalty of 0.01 per slot of distance from the first mask.
DEFAULT_WINDOW = 16
DEFAULT_ENTROPY_THRESHOLD = 0.3
DEFAULT_POSITION_PENALTY = 0.01
DEFAULT_MASK_TOKEN_ID = 151665  # Tencent's engine: the id after Qwen's 22 added tokens


@dataclass(frozen=True)
class WedlmSettings:
    """How to run WeDLM decoding; constructing one validates it."""

    mask_token_id: int = DEFAULT_MASK_TOKEN_ID
    window: int = DEFAULT_WINDOW
    entropy_threshold: float = DEFAULT_ENTROPY_THRESHOLD
    position_penalty: float = DEFAULT_POSITION_PENALTY

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"--wedlm-window must be an integer >= 1, got {self.window!r}")
        if self.entropy_threshold < 0 or self.position_penalty < 0:
            raise ValueError("--entropy-threshold and --position-penalty must be >= 0, got "
                             f"{self.entropy_threshold}, {self.position_penalty}")
        if self.mask_token_id < 0:
            raise ValueError(f"mask token id must be >= 0, got {self.mask_token_id}")


def pick(logits: mx.array, distance: Sequence[int], s: WedlmSettings, temperature: float = 0.0,
         key: mx.array | None = None) -> tuple[mx.array, mx.array]:
    """Each mask row's token and which rows to fill: entropy + penalty * distance (slots
    from the first mask) below the threshold, and always the most confident row. The token
    is the argmax, or with ``temperature`` > 0 a draw from softmax(logits / temperature)
    with ``key`` (the seed's sampler); the entropy is always the unscaled distribution's."""
    logits = logits.astype(mx.float32)
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    entropy = -mx.sum(mx.exp(logp) * logp, axis=-1)
    adjusted = entropy + s.position_penalty * mx.array(list(distance), dtype=mx.float32)
    fill = (adjusted < s.entropy_threshold) | (mx.arange(logits.shape[0]) == mx.argmin(adjusted))
    if temperature > 0:
        return mx.random.categorical(logits / temperature, axis=-1, key=key), fill
    return mx.argmax(logits, axis=-1), fill


def attach_settings(model: Model, settings: WedlmSettings) -> None:
    """Give ``model`` its WeDLM settings: a plain instance attribute (mlx's module ignores
    it; no mlx-lm class declares it), which ``settings_of`` reads."""
    setattr(model, "wedlm_settings", settings)


def settings_of(model: Model) -> WedlmSettings:
    """The WeDLM settings a loaded WeDLM model carries; a clear error for any other model."""
    s = vars(model).get("wedlm_settings") if hasattr(model, "__dict__") else None
    if not isinstance(s, WedlmSettings):
        raise ValueError(f"{type(model).__module__}.{type(model).__name__} is not a WeDLM model: "
                         "--decoder wedlm and --draft-type wedlm need a WeDLM checkpoint "
                         "(e.g. tencent/WeDLM-8B-Instruct) given as --model")
    return s
