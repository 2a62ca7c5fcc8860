"""Native multi-token-prediction (MTP) heads as Qwen3-Next / Qwen3.5 / 3.6 (``mtp.*``), MiMo
(``model.mtp_layers.*``), DeepSeek-V3 and GLM-4.5 / 4.6 / 4.7-Flash (``model.layers.{n}.*``)
checkpoints ship them (mlx-lm's ``sanitize`` drops them), read from the original checkpoint
(``Layout``: each family's names).

The block (Qwen3-Next's published maths; vLLM's and SGLang's MTP models compute the same):
``h' = norm(layer(fc(concat(pre_fc_norm_embedding(embed(t_next)), pre_fc_norm_hidden(h)))))``,
logits = the target's own LM head on ``h'``; ``h`` is the target's last hidden state after its
final norm (captured as the final norm's input and normed here with the target's norm) and, for
the next draft, the block's own ``h'``. ``layer`` is mlx-lm's decoder layer class of the target
(a full-attention one: the target's attention and MLP / MoE), ``embed`` and the LM head are the
target's. Invariants: the head's KV cache holds one entry per target position it has seen (rope
positions line up); ``draft`` trims its own speculative entries before returning. Qwen's norms are
stored zero-centred (``1 + w``), as for its targets; MiMo concatenates the hidden state first;
DeepSeek-V3 and GLM norm only the logits' input (``shared_head.norm``): the next draft reads
``layer(...)``.
Tests: tests/drafters/test_mtp.py.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, cast

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from ..core.arrays import load_arrays, scalar_float, scalar_int
from .head import Draft


@dataclass(frozen=True)
class Layout:
    """How a family publishes its MTP block: the key ``prefix``, its names of our block-level
    parts (``fc``, the two input norms, the output ``norm``), the concat order (MiMo puts the
    hidden state first) and whether norms are stored zero-centred (Qwen3-Next / 3.5).
    ``at_end``: the block is stored as the decoder layer after the model's last (DeepSeek-V3:
    ``model.layers.{n}.*``, the layer's keys bare, built as mlx-lm's layer ``n`` and converted
    by the target's own ``sanitize``), its ``norm`` applied before the LM head only (the next
    draft reads the layer's output) and its copies of the target's embeddings and LM head
    (``skip``) not read: the target's are used. ``first_zeroed``: what vLLM zeroes at the
    sequence's position 0 (DeepSeek-V3 and GLM: the token's embedding, MiMo: ``fc``'s output;
    Qwen: nothing), as their blocks were trained."""

    prefix: str
    names: dict
    hidden_first: bool = False
    centred: bool = False
    at_end: bool = False
    skip: tuple[str, ...] = ()
    first_zeroed: str = ""  # "", "embed" or "fc"


_QWEN = Layout("mtp.", {n: n for n in ("fc", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")},
               centred=True)
# MiMo (``model.mtp_layers.{i}.*``, vLLM's mimo_mtp reads the same): a qwen2-style layer
_MIMO = Layout("model.mtp_layers.", {"input_proj": "fc", "token_layernorm": "pre_fc_norm_embedding",
                                     "hidden_layernorm": "pre_fc_norm_hidden", "final_layernorm": "norm"},
               hidden_first=True, first_zeroed="fc")
# DeepSeek-V3 (``model.layers.{n}.*``, vLLM's deepseek_mtp reads the same): an MLA / MoE layer;
# GLM-4.5 / 4.6 (glm4_moe: GQA with partial rope and MoE) and GLM-4.7-Flash (glm4_moe_lite: MLA)
# publish theirs under the same names (vLLM's glm4_moe_mtp), their decoder layer as layer n
_AT_END = Layout("model.layers.{n}.", {"eh_proj": "fc", "enorm": "pre_fc_norm_embedding",
                                         "hnorm": "pre_fc_norm_hidden", "shared_head.norm": "norm"},
                   at_end=True, skip=("embed_tokens.weight", "shared_head.head.weight"), first_zeroed="embed")
LAYOUTS = {"qwen3_next": _QWEN, "qwen3_5": _QWEN, "qwen3_5_moe": _QWEN, "mimo": _MIMO,
           "deepseek_v3": _AT_END, "glm4_moe": _AT_END, "glm4_moe_lite": _AT_END}
_EXPERT = re.compile(r"^(layers\.\d+\.mlp)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class MtpFormatError(ValueError):
    """A directory or target that holds no usable MTP block."""


def text_model(target: nn.Module) -> nn.Module:
    """The mlx-lm text model (``args``, ``model``, LM head) of a target (Qwen3.5's is inside)."""
    return cast("nn.Module", getattr(target, "language_model", target))


def final_hidden(target: nn.Module) -> Callable[[mx.array], mx.array]:
    """The target's final norm: what turns the last layer's output into the MTP's ``h``."""
    return text_model(target).model.norm


def output_head(target: nn.Module) -> Callable[[mx.array], mx.array]:
    """The target's LM head (tied embeddings or ``lm_head``): the MTP block shares it."""
    text = text_model(target)
    if getattr(text.args, "tie_word_embeddings", False):
        return text.model.embed_tokens.as_linear
    return text.lm_head


@dataclass(frozen=True)
class Shared:
    """The target's parts the block uses, held outside its parameter tree (a plain value):
    loading and saving see only the ``mtp.*`` weights."""

    embed: Callable[[mx.array], mx.array]
    head: Callable[[mx.array], mx.array]
    norm: Callable[[mx.array], mx.array]  # the target's final norm


class MtpHead(nn.Module):
    """The MTP block (module doc); ``shared`` holds the target's embedding, LM head and norm."""

    def __init__(self, target: nn.Module, num_layers: int = 1):
        super().__init__()
        text = text_model(target)
        self.layout = layout_of(target)
        if num_layers != 1:
            raise MtpFormatError(f"the checkpoint has {num_layers} MTP layers; one is supported.")
        args, layers = text.args, text.model.layers
        # a full-attention layer of the target: its class and index give attention and MLP/MoE
        # (an at-end block: its own index, the one the checkpoint stores it at)
        idx = len(layers) if self.layout.at_end else \
            next((i for i, l in enumerate(layers) if not getattr(l, "is_linear", False)), None)
        if idx is None:
            raise MtpFormatError("the target has no full-attention layer to model the MTP layer on.")
        h, eps = args.hidden_size, args.rms_norm_eps
        # Qwen's and DeepSeek's layers take their index (linear or not, MoE or not), MiMo's do not
        cls = type(layers[min(idx, len(layers) - 1)])
        self.layers = [cls(args, idx) if len(inspect.signature(cls).parameters) > 1 else cls(args)]
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = nn.RMSNorm(h, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(h, eps=eps)
        self.norm = nn.RMSNorm(h, eps=eps)
        self.shared = Shared(text.model.embed_tokens, output_head(target), final_hidden(target))
        self.feature_width, self.vocab_size = h, args.vocab_size  # ``head.DraftHead``: one normed hidden state

    def describe(self) -> dict[str, Any]:
        """Its layout, sizes and layer class (``head.DraftHead``; the target's fingerprint keys the rest)."""
        return {"layout": self.layout.prefix, "sizes": (self.feature_width, self.vocab_size),
                "layer": type(self.layers[0]).__module__}

    def step(self, tokens: mx.array, hidden: mx.array, mask: Any, cache: KVCache) -> mx.array:
        """``tokens`` (1, T) after positions whose hidden states are ``hidden`` (1, T, H) -> the
        block's normed output (1, T, H), its entries added to ``cache``."""
        zeroed = self.layout.first_zeroed if cache.offset == 0 else ""
        embedded = self.pre_fc_norm_embedding(self.shared.embed(tokens))  # norm(0) = 0: zeroing commutes
        embedded = _first_row_zeroed(embedded) if zeroed == "embed" else embedded
        parts = [embedded, self.pre_fc_norm_hidden(hidden)]
        x = self.fc(mx.concatenate(parts[::-1] if self.layout.hidden_first else parts, axis=-1))
        x = self.layers[0](_first_row_zeroed(x) if zeroed == "fc" else x, mask, cache)
        return x if self.layout.at_end else self.norm(x)

    def logits(self, h: mx.array) -> mx.array:
        """The shared LM head on the block's output (DeepSeek's ``shared_head.norm`` first)."""
        return self.shared.head(self.norm(h) if self.layout.at_end else h)

    def make_cache(self) -> list[KVCache]:
        return [KVCache()]

    def feed(self, cache: list[KVCache], hidden: mx.array, tokens: mx.array) -> list[mx.array]:
        """Feed verified positions without drafting (``draft``'s first step alone); returns the
        cache's arrays, for the caller to evaluate (in the target forward's sync, or its own)."""
        self.step(tokens, hidden, _mask(hidden, cache[0]), cache[0])
        return list(cache[0].state)

    def draft(self, cache: list[KVCache], hidden: mx.array, tokens: mx.array, k: int) -> Draft:
        """Feed n verified positions and draft ``k`` tokens greedily, recursively on its own output.

        ``hidden`` (1, n, H): the target's normed last hidden state at the n positions; ``tokens``
        (1, n): the token after each (the last is the next input). The n entries stay in
        ``cache``; the k - 1 speculative ones are trimmed before returning (one host sync)."""
        if hidden.shape[1] != tokens.shape[1] or hidden.shape[1] < 1:
            raise ValueError(f"hidden {hidden.shape} and tokens {tokens.shape} must cover the same "
                             "n >= 1 positions.")
        h = self.step(tokens, hidden, _mask(hidden, cache[0]), cache[0])[:, -1:]
        out, lps = [], []
        for i in range(k):
            logp = nn.log_softmax(self.logits(h)[0, -1].astype(mx.float32))
            tok = mx.argmax(logp)
            out.append(tok)
            lps.append(logp[tok])
            if i + 1 < k:
                h = self.step(tok.reshape(1, 1), h, None, cache[0])
        mx.eval(out, lps)
        cache[0].trim(k - 1)
        return Draft([scalar_int(t) for t in out], [scalar_float(v) for v in lps])


def _first_row_zeroed(x: mx.array) -> mx.array:
    """``x`` (1, T, H) with its first row zeroed: the block's input at the sequence's position 0."""
    return x * (mx.arange(x.shape[1]) > 0).astype(x.dtype)[:, None]


def _mask(hidden: mx.array, cache: KVCache) -> Any:
    """The causal mask of n new rows after ``cache``, as an array (DeepSeek's MLA attention
    reads it with ``mx.where``: the ``"causal"`` shorthand does not do there)."""
    return create_attention_mask(hidden, cache, return_array=True)


def layout_of(target: nn.Module) -> Layout:
    """The MTP layout of the target's family (``MtpFormatError`` for one without MTP blocks)."""
    arch = type(target).__module__.rsplit(".", 1)[-1]
    if arch not in LAYOUTS:
        raise MtpFormatError(f"--draft-type mtp reads the MTP blocks of Qwen3-Next, Qwen3.5 / 3.6, MiMo, "
                             f"DeepSeek-V3 and GLM-4.5 / 4.6 / 4.7-Flash; the target is mlx-lm's {arch!r} "
                             f"(supported: {', '.join(LAYOUTS)}).")
    return LAYOUTS[arch]


def read_mtp_weights(path: str | Path, prefix: str = "mtp.") -> dict[str, mx.array]:
    """The ``mtp.*`` tensors of a checkpoint directory (sharded or not), prefix removed; only
    the shards that hold them are opened."""
    d = Path(path)
    index = d / "model.safetensors.index.json"
    if index.is_file():
        wmap = json.loads(index.read_text()).get("weight_map", {})
        files = sorted({f for k, f in wmap.items() if k.startswith(prefix)})
    else:
        files = sorted(p.name for p in d.glob("*.safetensors"))
    out: dict[str, mx.array] = {}
    for f in files:
        out.update({k[len(prefix):]: v for k, v in load_arrays(str(d / f)).items() if k.startswith(prefix)})
    if not out:
        raise MtpFormatError(f"{d} holds no {prefix}* weights: point --draft-model at the original "
                             "checkpoint (mlx-community conversions drop its MTP layers).")
    return out


def our_name(key: str, layout: Layout) -> str:
    """A published key (prefix removed: ``layers.0.x``, ``fc.weight``, MiMo's ``0.input_proj.weight``)
    -> our module path (``layers.0.x``, ``fc.weight``)."""
    m = None if layout.at_end else re.match(r"^(?:layers\.)?(\d+)\.(.*)$", key)
    index, rest = m.groups() if m else ("0" if layout.at_end else None, key)
    part, _, leaf = rest.rpartition(".")
    if part in layout.names:
        return f"{layout.names[part]}.{leaf}"
    return rest if index is None else f"layers.{index}.{rest}"


def canonical(weights: dict[str, mx.array], layout: Layout = _QWEN) -> dict[str, mx.array]:
    """Published MTP weights -> ours: renamed (``our_name``), zero-centred norms read as
    ``1 + w``, per-expert or fused (``experts.gate_up_proj``) expert weights stacked as mlx-lm's
    ``switch_mlp``."""
    out: dict[str, mx.array] = {}
    experts: dict[tuple[str, str], dict[int, mx.array]] = {}
    for k, v in ((our_name(k, layout), v) for k, v in weights.items() if k not in layout.skip):
        m = _EXPERT.match(k)
        if m:
            experts.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = v
        elif k.endswith(".experts.gate_up_proj"):
            mid, base = v.shape[-2] // 2, k[:-len(".experts.gate_up_proj")]
            out[f"{base}.switch_mlp.gate_proj.weight"] = v[..., :mid, :]
            out[f"{base}.switch_mlp.up_proj.weight"] = v[..., mid:, :]
        elif k.endswith(".experts.down_proj"):
            out[k[:-len(".experts.down_proj")] + ".switch_mlp.down_proj.weight"] = v
        elif layout.centred and k.endswith("norm.weight") and v.ndim == 1:
            out[k] = v + 1.0
        else:
            out[k] = v
    for (base, name), by_expert in experts.items():
        out[f"{base}.switch_mlp.{name}.weight"] = mx.stack([by_expert[e] for e in sorted(by_expert)])
    return out


def as_target_sanitizes(target: nn.Module, weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """An at-end block's weights (prefix removed) as mlx-lm's ``sanitize`` converts the target's
    own layers (experts stacked, DeepSeek's ``kv_b_proj`` split for MLA, fp8 dequantized): named
    as the target's last layer for it (it drops the MTP layer's own index), then named back."""
    sanitize = getattr(target, "sanitize", None)
    if sanitize is None:
        return weights
    prefix = f"model.layers.{len(text_model(target).model.layers) - 1}."
    out = sanitize({prefix + k: v for k, v in weights.items()})
    return {k[len(prefix):]: v for k, v in out.items() if k.startswith(prefix)}


def load_mtp(path: str | Path, target: nn.Module, dtype: mx.Dtype | None = None) -> MtpHead:
    """The MTP block of the checkpoint at ``path`` for ``target`` (weights cast to ``dtype``,
    default the target's float dtype); raises ``MtpFormatError`` saying what to pass."""
    d = Path(path)
    if not d.is_dir():
        raise MtpFormatError(f"{d} is not a directory: --draft-model names the original checkpoint "
                             "directory (config.json + *.safetensors with mtp.* weights).")
    layout, n_layers = layout_of(target), len(text_model(target).model.layers)
    weights = read_mtp_weights(d, layout.prefix.format(n=n_layers))
    if layout.at_end:
        weights = as_target_sanitizes(target, weights)
    weights = canonical(weights, layout)
    n = len({k.split(".")[1] for k in weights if k.startswith("layers.")})
    head = MtpHead(target, n)
    dtype = dtype or text_model(target).model.norm.weight.dtype  # norms are never quantized
    weights = {k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v
               for k, v in weights.items()}
    try:
        head.load_weights(list(weights.items()), strict=True)
    except ValueError as e:
        raise MtpFormatError(f"the mtp.* weights in {d} do not fit the target's MTP block: {e}") from e
    mx.eval(head.parameters())
    return head


def load_for(target: nn.Module, draft_model: str | None = None) -> MtpHead:
    """The MTP block ``--draft-type mtp`` drafts with: from ``draft_model`` (the original
    checkpoint's directory), else the directory the target was loaded from."""
    source = draft_model or getattr(target, "specdec_source", None)
    if not source:
        raise MtpFormatError("--draft-type mtp needs --draft-model DIR (the original checkpoint with "
                             "its mtp.* weights): the model was not loaded from a local directory")
    return load_mtp(source, target)
