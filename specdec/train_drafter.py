"""``specdec train-drafter``: an EAGLE-3 head for your model, trained here in MLX.

Contract: flags map onto ``pipeline.DrafterOptions`` / ``trainer.TrainConfig``; the target
answers the prompts (built-in set, or ``--data`` JSONL) greedily, a shard's prompts as one batch,
and those forwards give the features and labels (``eagle.one_pass``); rerunning the same
command resumes. mlx is imported inside the command (after the
OpenBLAS preload). Tests: tests/test_train_drafter.py.
"""

from __future__ import annotations

import argparse
import sys


# flags that shape a new head; a start head (--init-head) has its own, so giving one is an error
HEAD_DEFAULTS = {"draft_vocab": 8192, "layer_type": "auto", "init_from_target": True}


def resolve_head_flags(args: argparse.Namespace) -> None:
    """Fill the head-shaping flags' defaults in ``args``; refuse any given explicitly beside
    ``--init-head`` (the start head's own vocabulary, layer class and weights are used, so the
    flag would be silently ignored). Tests: tests/test_train_drafter.py."""
    flags = {"draft_vocab": "--draft-vocab", "layer_type": "--layer-type",
             "init_from_target": "--init-from-target/--no-init-from-target"}
    given = [flag for key, flag in flags.items() if getattr(args, key) is not None]
    if args.init_head and given:
        raise ValueError(f"{', '.join(given)} cannot change a head started from --init-head "
                         f"{args.init_head} (its draft vocabulary, layer type and weights are "
                         "kept): drop them, or train a new head without --init-head.")
    for key, default in HEAD_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)


def add_train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-drafter", help="train an EAGLE-3 draft head for a model (MLX)")
    p.add_argument("--model", default="smollm2-135m", help="packaged name, .gguf path or mlx-lm dir")
    p.add_argument("--output", required=True, help="directory for the head (config.json + "
                   "model.safetensors), its data shards and checkpoints")
    p.add_argument("--data", help="JSONL of prompts (\"prompt\" field); default: the built-in set")
    p.add_argument("--max-prompts", type=int, default=0, help="use at most N prompts (0: all)")
    p.add_argument("--max-tokens", type=int, default=128, help="answer length per prompt")
    p.add_argument("--heldout", type=int, default=8, help="prompts held out for acceptance")
    p.add_argument("--shard-size", type=int, default=32,
                   help="prompts answered as one batch and stored as one shard")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ttt-steps", type=int, default=3, help="training-time-test unroll depth")
    p.add_argument("--scale-features", action="store_true",
                   help="train fc on per-feature scaled target features (folded into fc on save)")
    p.add_argument("--answer-only", action="store_true",
                   help="score the loss on answer positions only (the head never drafts the prompt)")
    # head-shaping flags default to None so an explicit one beside --init-head is refused
    # (the start head fixes them); resolve_head_flags fills the defaults below
    p.add_argument("--init-from-target", action=argparse.BooleanOptionalAction, default=None,
                   help="start the head's decoder layer as the target's last layer (fc passing "
                        "the highest feature through; default); --no-init-from-target: random, "
                        "fc calibrated")
    p.add_argument("--init-head", metavar="DIR",
                   help="start from this trained head (its weights, draft vocabulary and layers) "
                        "instead of a new one: train it on more or other prompts")
    p.add_argument("--draft-vocab", type=int, default=None,
                   help=f"draft vocabulary size (default {HEAD_DEFAULTS['draft_vocab']})")
    p.add_argument("--layers", help="comma-separated target layer ids (default 2,L/2,L-3)")
    p.add_argument("--layer-type", default=None, choices=("auto", "llama", "qwen2", "qwen3"),
                   help="decoder layer class of the head (default auto); auto: the target's "
                        "own where the head supports it (init-from-target copies every weight), "
                        "else llama (LlamaForCausalLMEagle3 loads in EAGLE/vLLM/SGLang)")
    p.add_argument("--distill-only", action="store_true",
                   help="write the data shards (the target's answers and features) and stop; the "
                        "same command without it trains on them later")
    p.add_argument("--dtype", default="float32", help="target dtype while distilling")
    p.add_argument("--seed", type=int, default=0)


def cmd_train_drafter(args: argparse.Namespace) -> int:
    from .core.text import encode_prompt  # imports after the OpenBLAS preload
    from .eagle.one_pass import one_pass
    from .eagle.pipeline import DrafterOptions, distill_only, train_drafter
    from .eagle.prompts import default_prompts, read_jsonl
    from .eagle.trainer import TrainConfig
    from .loader import load

    resolve_head_flags(args)
    if args.max_prompts < 0 or min(args.epochs, args.max_tokens, args.shard_size) < 1:
        raise ValueError("--max-prompts must be >= 0; --epochs, --max-tokens, --shard-size >= 1")
    layers = tuple(int(x) for x in args.layers.split(",")) if args.layers else None
    model, tokenizer = load(args.model, dtype=args.dtype)
    texts = read_jsonl(args.data) if args.data else default_prompts(args.seed)
    texts = texts[: args.max_prompts] if args.max_prompts else texts
    prompt_ids = [encode_prompt(tokenizer, t) for t in texts]
    opts = DrafterOptions(
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                          ttt_steps=args.ttt_steps, seed=args.seed,
                          scale_features=args.scale_features, answer_only=args.answer_only),
        draft_vocab=args.draft_vocab, heldout=args.heldout, shard_size=args.shard_size, layer_ids=layers,
        layer_type=args.layer_type, init_from_target=args.init_from_target,
        init_head=args.init_head)

    distiller = one_pass(model, args.max_tokens, tokenizer.eos_token_ids)
    if args.distill_only:
        train, held = distill_only(model, prompt_ids, args.output, opts, distiller, args.max_tokens)
        print(f"distilled {len(prompt_ids)} prompts into {len(train)} train and {len(held)} held-out "
              f"shards under {args.output}/data; run the command without --distill-only to train")
        return 0
    report = train_drafter(model, prompt_ids, args.output, opts, distiller, args.max_tokens)
    if report is None:  # only a run told to stop after some shards ends without one
        raise RuntimeError("training stopped before its end: no held-out report")
    acc = report.acceptance[-1]
    print("held-out acceptance by draft position: " + " ".join(f"{a:.3f}" for a in acc))
    print(f"estimated tokens per target forward (chain of {len(acc)}): {1 + sum(acc):.2f}")
    return 0
