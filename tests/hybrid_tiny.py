"""Tiny random-weight hybrid (recurrent + attention) and pure-SSM models, built from
mlx-lm's own model classes through ``ModelArgs.from_dict`` (as loading a directory does)."""

from __future__ import annotations

import functools
import importlib

import mlx.core as mx
from mlx.utils import tree_map

VOCAB = 64
_ATTN = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16)
_MAMBA = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_d_conv=4, mamba_n_groups=1,
              mamba_conv_bias=True, mamba_proj_bias=False)
_QWEN_LINEAR = dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                    linear_value_head_dim=16, linear_conv_kernel_dim=4, full_attention_interval=2,
                    partial_rotary_factor=0.5, rope_theta=10000.0, max_position_embeddings=512,
                    rms_norm_eps=1e-5)

CONFIGS = {
    "qwen3_next": dict(hidden_size=64, num_hidden_layers=4, intermediate_size=128, num_experts=0,
                       num_experts_per_tok=1, decoder_sparse_step=1, shared_expert_intermediate_size=64,
                       mlp_only_layers=[0, 1, 2, 3], moe_intermediate_size=64, **_ATTN, **_QWEN_LINEAR),
    "qwen3_5": dict(hidden_size=64, num_hidden_layers=4, intermediate_size=128, **_ATTN, **_QWEN_LINEAR),
    "lfm2": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=512, norm_eps=1e-5, conv_bias=False, conv_L_cache=3,
                 block_dim=64, block_multiple_of=16, block_ffn_dim_multiplier=1.0,
                 block_auto_adjust_ff_dim=False, block_ff_dim=128,
                 layer_types=["conv", "full_attention", "conv", "full_attention"]),
    "mamba2": dict(num_heads=4, head_dim=16, hidden_size=32, intermediate_size=64, state_size=8,
                   num_hidden_layers=2, layer_norm_epsilon=1e-5, conv_kernel=4, n_groups=1,
                   use_bias=False, use_conv_bias=True, tie_word_embeddings=True,
                   time_step_limit=(0.0, float("inf")), time_step_rank=4),
    "nemotron_h": dict(hidden_size=64, intermediate_size=128, max_position_embeddings=512,
                       attention_bias=False, mamba_num_heads=4, mamba_head_dim=16,
                       mamba_proj_bias=False, ssm_state_size=8, conv_kernel=4, n_groups=1,
                       mlp_bias=False, layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True,
                       hybrid_override_pattern=["M", "*", "-", "M"], **_ATTN),
    "falcon_h1": dict(hidden_size=64, head_dim=16, intermediate_size=128, mamba_d_ssm=64,
                      mamba_d_state=8, mamba_n_heads=4, mamba_d_head=16, mamba_chunk_size=16,
                      num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                      rope_theta=10000.0, max_position_embeddings=512),
    "granitemoehybrid": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                             max_position_embeddings=512, num_attention_heads=4,
                             num_key_value_heads=2, attention_bias=False, embedding_multiplier=1.0,
                             attention_multiplier=0.25, logits_scaling=1.0, residual_multiplier=1.0,
                             layer_types=["mamba", "attention", "mamba"], rms_norm_eps=1e-5,
                             shared_intermediate_size=128, **_MAMBA),
}
ARCHS = list(CONFIGS)
# not hybrid, so not in ARCHS: a tiny directory of an architecture mlx.distributed can shard
# (tests/test_distributed.py serves it instead of loading a real model on each rank)
PLAIN = {"qwen2": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                       num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5)}


def config(arch: str) -> dict:
    return dict(CONFIGS[arch] if arch in CONFIGS else PLAIN[arch], model_type=arch, vocab_size=VOCAB)


def build(arch: str, seed: int = 0, scale: float = 0.5):
    """A random-weight model (weights scaled up so greedy outputs vary)."""
    mod = importlib.import_module(f"mlx_lm.models.{arch}")
    model = mod.Model(mod.ModelArgs.from_dict(config(arch)))
    mx.random.seed(seed)
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * scale, model.parameters()))
    mx.eval(model.parameters())
    return model


@functools.lru_cache(maxsize=None)
def cached(arch: str, seed: int = 0):
    return build(arch, seed)


DIR_VOCAB = 272  # 256 byte tokens + the chat specials, padded
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_tokenizer(path) -> None:
    """A byte-level BPE tokenizer (no merges: one token per byte) with ChatML specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))


def save_dir(arch: str, path, seed: int = 0, scale: float = 0.15):
    """A tiny random-weight model directory in mlx-lm's layout (config.json, safetensors,
    tokenizer): what ``specdec generate --model DIR`` and ``specdec serve`` load."""
    import json
    from pathlib import Path

    from mlx.utils import tree_flatten

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = dict(config(arch), vocab_size=DIR_VOCAB)
    mod = importlib.import_module(f"mlx_lm.models.{arch}")
    model = mod.Model(mod.ModelArgs.from_dict(cfg))
    mx.random.seed(seed)
    # small weights: the model falls into loops, so n-gram and suffix drafts get accepted
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * scale, model.parameters()))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (path / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(path)
    return path
