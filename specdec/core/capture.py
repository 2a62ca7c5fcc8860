"""Scoped capture of chosen layers' hidden states from one forward of an mlx-lm model.

Contract: inside ``with capture_layers(model, ids) as cap:`` each forward of ``model`` records the
*input* of decoder layer ``i`` for every ``i`` in ids (EAGLE-3's convention: the hidden state after
layer i-1, pre-norm; vLLM's aux hidden states are the same); ``i`` = the layer count names the last
layer's output, the final norm's input (what MTP heads read); the model's layer list is restored on
exit, even on error. Nothing runs twice: the wrapped layer is called once with its own arguments.
``read_forward`` runs a forward that verifies nothing (a prefill chunk, a plain step) for the
drafters' ``Wants`` (batch row i for wants i).
Tests: tests/eagle/test_capture.py, tests/drafters/test_eagle.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx

from .proposal import Returned, Wants


@dataclass
class CapturedFeatures:
    """The last forward's inputs of ``layer_ids`` (each (B, L, H)), in ``layer_ids`` order."""

    layer_ids: tuple[int, ...]
    hidden: dict[int, mx.array] = field(default_factory=dict)

    def fused_input(self) -> mx.array:
        """(B, L, len(ids)*H): the concatenation an EAGLE-3 head's ``fc`` reads."""
        missing = [i for i in self.layer_ids if i not in self.hidden]
        if missing:
            raise RuntimeError(f"no forward ran inside the capture (layers {missing} not seen).")
        return mx.concatenate([self.hidden[i] for i in self.layer_ids], axis=-1)


class _Recorder:
    """Stands in for one layer: records its input (or, with ``output``, its output), then
    returns what the layer returns, unchanged."""

    def __init__(self, layer: Any, index: int, sink: CapturedFeatures, output: bool = False):
        self.layer, self.index, self.sink, self.output = layer, index, sink, output

    def __call__(self, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        if not self.output:
            self.sink.hidden[self.index] = x
        y = self.layer(x, *args, **kwargs)
        if self.output:
            self.sink.hidden[self.index] = y
        return y

    def __getattr__(self, name: str) -> Any:  # layer attributes (e.g. use_sliding) read through
        return getattr(self.layer, name)


def decoder_layers(model: Any) -> list[Any]:
    """The mutable list of decoder layers the model's forward iterates."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, list):
        raise TypeError(f"{type(model).__name__} keeps no list of decoder layers at .model.layers; "
                        "feature capture supports mlx-lm's llama/qwen2/qwen3-style models.")
    return layers


@contextmanager
def capture_layers(model: Any, layer_ids: Sequence[int]) -> Iterator[CapturedFeatures]:
    layers = decoder_layers(model)
    n = len(layers)
    bad = [i for i in layer_ids if not 0 <= i <= n]
    if bad:
        raise ValueError(f"layer ids {bad} out of range for a {n}-layer model (0..{n}; "
                         f"{n}: the last layer's output).")
    sink = CapturedFeatures(tuple(layer_ids))
    wanted = set(layer_ids)
    originals = {i: layers[i] for i in wanted - {n}}
    if n in wanted:  # the last layer's output: wrap it (outside any input recorder of its own)
        originals.setdefault(n - 1, layers[n - 1])
    try:
        for i in sorted(originals):
            layers[i] = _Recorder(originals[i], i, sink) if i in wanted else originals[i]
        if n in wanted:
            layers[n - 1] = _Recorder(layers[n - 1], n, sink, output=True)
        yield sink
    finally:
        for i, layer in originals.items():
            layers[i] = layer


def read_forward(model: Any, forward: Callable[[], Any], wants: Sequence[Wants | None],
                 rows: Sequence[int]) -> tuple[Any, list[mx.array]]:
    """Run ``forward()`` (one forward of ``model``; its batch row i is ``wants[i]``'s) with the
    layers the wants name captured: (what it returned, the arrays each ``Wants.read`` returns
    for its row's first ``rows[i]`` positions, for the caller's one sync)."""
    layers = sorted({j for w in wants if w for j in w.layers})
    if not layers:
        return forward(), []
    with capture_layers(model, layers) as cap:
        out = forward()
    return out, [a for i, w in enumerate(wants) if w
                 for a in w.read(Returned(hidden={j: cap.hidden[j][i, :rows[i]] for j in w.layers}))]
