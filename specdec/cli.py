"""The ``specdec`` command line.

Contract: ``specdec generate`` decodes one prompt (flags follow mlx-lm's names);
``--compare`` also runs plain decoding and reports both speeds, the speedup and whether the
tokens are identical; ``--json`` prints one JSON object instead of text. ``specdec parity``
runs the losslessness check with its diagnosis. On Linux the command re-executes itself
with OpenBLAS preloaded (see ``backend``) before mlx is imported.
Tests: tests/test_cli.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .backend import ensure_openblas
from .bench.cli import add_bench_parser, cmd_bench
from .config import DTYPES, KV_BITS, RunConfig, add_decoder_flags, add_distributed_flags, add_draft_flags
from .core.model import Model
from .drafters import NgramDrafter
from .drafters.spec import DEFAULT_NUM_DRAFT_TOKENS
from .loader import ModelLoadError, load
from .server.cli import add_serve_parser, cmd_serve
from .train_drafter import add_train_parser, cmd_train_drafter

# The modules that import mlx are imported inside the commands that need them: mlx must load
# after main() has preloaded OpenBLAS, and `specdec --help` starts without it.
if TYPE_CHECKING:
    from .cache.prompt_cache import PromptCache
    from .core.stats import SpecStats
    from .engine import GenerationResult


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="packaged name, .gguf path or mlx-lm dir")
    p.add_argument("--prompt", help="prompt text ('-' reads stdin; default: the demo edit prompt)")
    p.add_argument("--prompt-file", help="read the prompt from this file")
    p.add_argument("--system", help="system message (chat models)")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--max-tokens", "-m", type=int, default=256)
    add_draft_flags(p)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--json-schema", metavar="FILE",
                   help="the output follows this JSON schema (every verified token masked by "
                        "its grammar; --draft-type grammar,... drafts the tokens it forces)")
    p.add_argument("--temp", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the request's sampling: the same seed gives the same tokens "
                        "whatever the drafter (and as --draft-type none)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="1.0 = off")
    p.add_argument("--repetition-context-size", type=int, default=20)
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="auto: float32 on CPU")
    p.add_argument("--kv-bits", type=int, choices=KV_BITS, default=None,
                   help="quantize the KV cache: plain decoding only (--draft-type none), as "
                        "speculation on it is not lossless (docs/caches.md)")
    p.add_argument("--prefill-step-size", type=int, default=512)
    p.add_argument("--prompt-cache-file",
                   help="reuse the KV cache saved in this file for the prompt's shared prefix, "
                        "then save the cache (prompt + reply) back to it, like mlx_lm.cache_prompt")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text with speculative decoding")
    _add_run_flags(gen)
    gen.add_argument("--compare", action="store_true", help="also run plain decoding and compare")
    gen.add_argument("--verbose", "-v", action="store_true", help="print speculation stats")
    gen.add_argument("--trace", metavar="FILE",
                     help="write a JSONL row per decode step (k, cost gate, times; lab/gate-trace)")
    add_decoder_flags(gen)
    add_distributed_flags(gen)
    par = sub.add_parser("parity", help="check speculative == plain greedy and diagnose")
    _add_run_flags(par)
    cost = sub.add_parser("cost", help="measure verify cost(L)/cost(1) and drafter cost")
    cost.add_argument("--model", default="smollm2-135m")
    cost.add_argument("--dtype", choices=DTYPES, default="auto")
    cost.add_argument("--max-len", type=int, default=17)
    cost.add_argument("--num-draft-tokens", type=int, default=DEFAULT_NUM_DRAFT_TOKENS)
    cost.add_argument("--json", action="store_true")
    add_serve_parser(sub)
    add_bench_parser(sub)
    add_train_parser(sub)
    return parser


def _load(cfg: RunConfig):
    return load(cfg.model, dtype=cfg.dtype)


def _stats_line(label: str, s: SpecStats) -> str:
    return (
        f"{label}: {s.generated_tokens} tokens, decode {s.decode_tokens_per_s:.1f} tok/s, "
        f"prefill {s.prefill_tokens_per_s:.1f} tok/s, ttft {s.ttft_s:.2f}s, "
        f"steps {s.verify_steps} ({s.draft_steps} drafted), accepted {s.accepted}/{s.drafted} "
        f"({s.acceptance_rate:.0%}), mean acceptance length {s.mean_acceptance_length:.2f}, "
        f"{s.tokens_per_forward:.2f} tokens/forward, "
        f"p_cache {s.p_cache:.2f}" + (f", {s.cached_tokens} prompt tokens cached" if s.cached_tokens else "")
    )


def _summary(res: GenerationResult, base: GenerationResult | None, sampled: bool = False) -> dict:
    s = res.stats
    out = {
        "text": res.text,
        "tokens": res.tokens,
        "finish_reason": res.finish_reason,
        "spec_tokens_per_s": s.decode_tokens_per_s,
        "acceptance_rate": s.acceptance_rate,
        "mean_acceptance_length": s.mean_acceptance_length,
        "verify_steps": s.verify_steps,
        "stats": s.to_dict(),
    }
    if base is not None:
        b = base.stats.decode_tokens_per_s
        out.update(
            # unseeded sampled runs draw different random numbers: only the distribution is
            # equal; a seed pins the tokens (position-keyed sampling), so they must match
            parity=None if sampled else base.tokens == res.tokens,
            baseline_tokens_per_s=b,
            speedup=s.decode_tokens_per_s / b if b else None,
            baseline_tokens=len(base.tokens),
        )
    return out


def _save_memory(cfg: RunConfig, prompt_cache: PromptCache | None) -> None:
    """Persist the ngram-mod table when --ngram-mod-file names one (the run's whole text is in
    it: the drafter's ``end``), and the prompt cache when --prompt-cache-file names one
    (each an atomic replace)."""
    if cfg.spec.ngram_mod_file and cfg.table is not None:
        cfg.table.save(cfg.spec.ngram_mod_file)
    if prompt_cache is not None and cfg.prompt_cache_file:  # only that file makes one
        prompt_cache.save(cfg.prompt_cache_file)


def _prompt_cache(cfg: RunConfig, model: Model) -> PromptCache | None:
    """The --prompt-cache-file cache: loaded when the file exists, else a new one."""
    if not cfg.prompt_cache_file:
        return None
    from .cache.prompt_cache import load_prompt_cache, make_prompt_cache  # imports mlx: see the top

    if os.path.exists(cfg.prompt_cache_file):
        return load_prompt_cache(cfg.prompt_cache_file, model)
    return make_prompt_cache(model, max_draft_tokens=max(32, cfg.spec.num_draft_tokens),
                             kv_bits=cfg.kv_bits)


def cmd_generate(args: argparse.Namespace) -> int:
    cfg = RunConfig.from_args(args)
    prompt = cfg.read_prompt()
    if getattr(args, "distributed", False):
        from .distributed import load_sharded, refuse_unsharded_features, run_sharded  # mlx: see the top

        refuse_unsharded_features(tree_budget=cfg.spec.draft_tree_budget,
                                  prompt_cache_file=cfg.prompt_cache_file)
        return run_sharded(*load_sharded(cfg.model, cfg.dtype), args.distributed_timeout,
                           lambda model, tok: _generate(args, cfg, prompt, model, tok))
    if cfg.decoder == "wedlm":
        return _generate_wedlm(args, cfg, prompt, *_load(cfg))
    return _generate(args, cfg, prompt, *_load(cfg))


def _generate_wedlm(args: argparse.Namespace, cfg: RunConfig, prompt: str, model: Model,
                    tokenizer: Any) -> int:
    """--decoder wedlm: WeDLM's lossy parallel decoder; every result says lossless: false."""
    from .core.wedlm import settings_of  # imports mlx: see the top
    from .decode.wedlm import generate_wedlm  # imports mlx: see the top
    from .engine import generate  # imports mlx: see the top

    settings = cfg.wedlm_settings(settings_of(model).mask_token_id)
    chat = False if cfg.raw else None
    res = generate_wedlm(model, tokenizer, prompt, settings, temperature=cfg.temp, seed=cfg.seed,
                         max_tokens=cfg.max_tokens, stop=cfg.stop, system=cfg.system, chat=chat)
    out = res.to_dict()
    if args.compare:  # plain AR decoding of the same checkpoint: how far the lossy output is
        base = generate(model, tokenizer, prompt, drafter=None, temperature=cfg.temp, seed=cfg.seed,
                        max_tokens=cfg.max_tokens, stop=cfg.stop, system=cfg.system, chat=chat)
        out.update(baseline_tokens_per_s=base.stats.decode_tokens_per_s,
                   parity=base.tokens == res.tokens)
    if args.json:
        print(json.dumps(out))
        return 0
    print(res.text)
    if args.verbose or args.compare:
        print(f"wedlm (lossless: false): {len(res.tokens)} tokens, {out['forwards']} forwards, "
              f"{out['tokens_per_forward']:.2f} tokens/forward, {out['tokens_per_s']:.1f} tok/s"
              + (f"; plain {out['baseline_tokens_per_s']:.1f} tok/s, same tokens: {out['parity']}"
                 if args.compare else ""), file=sys.stderr)
    return 0


def _generate(args: argparse.Namespace, cfg: RunConfig, prompt: str, model: Model,
              tokenizer: Any) -> int:
    from .decode import trace  # imports mlx: see the top
    from .engine import generate  # imports mlx: see the top

    kw = {**cfg.engine_kwargs(), "drafter": cfg.build_drafter(model, tokenizer)}
    base = None
    if args.compare:
        generate(model, tokenizer, prompt,  # warm-up
                 **{**kw, "drafter": None, "generation": replace(kw["generation"], max_tokens=8)})
        base = generate(model, tokenizer, prompt, **{**kw, "drafter": None})
    # the main run reuses the prompt cache; the --compare baseline runs without it
    prompt_cache = _prompt_cache(cfg, model)
    kw["prompt_cache"] = prompt_cache
    with trace.tracing(args.trace) if getattr(args, "trace", None) else nullcontext():
        return _run(args, cfg, prompt, model, tokenizer, kw, base)


def _run(args: argparse.Namespace, cfg: RunConfig, prompt: str, model: Model, tokenizer: Any,
         kw: dict, base: Any) -> int:
    """The main run of ``specdec generate`` (traced when asked) and its report."""
    from .engine import generate, stream_generate  # imports mlx: see the top

    if args.json or args.compare:
        res = generate(model, tokenizer, prompt, **kw)
        stats = res.stats
        if not args.json:
            print(res.text)
    else:
        for r in stream_generate(model, tokenizer, prompt, **kw):
            print(r.text, end="", flush=True)
        print()
        stats = r.stats
    _save_memory(cfg, kw["prompt_cache"])
    if args.json:
        print(json.dumps(_summary(res, base, cfg.temp > 0 and cfg.seed is None)))
        return 0
    if args.verbose or args.compare:
        print("=" * 10, file=sys.stderr)
        if base is not None:
            print(_stats_line("plain", base.stats), file=sys.stderr)
        print(_stats_line(stats.drafter, stats), file=sys.stderr)
    if base is not None:
        summ = _summary(res, base, cfg.temp > 0 and cfg.seed is None)
        verdict = {True: "IDENTICAL", False: "DIFFERENT (run `specdec parity`)"}.get(
            summ["parity"], "sampled without --seed (same distribution, different draws)"
        )
        print(f"speedup {summ['speedup']:.2f}x   tokens {verdict}", file=sys.stderr)
    return 0


def cmd_parity(args: argparse.Namespace) -> int:
    cfg = RunConfig.from_args(args)
    if cfg.prompt_cache_file:
        raise ValueError("--prompt-cache-file applies to specdec generate, not parity")
    prompt = cfg.read_prompt()
    model, tokenizer = _load(cfg)
    from .parity import check_parity  # imports mlx: see the top

    t0 = time.perf_counter()
    kw = {**cfg.engine_kwargs(), "drafter": cfg.build_drafter(model, tokenizer)}
    report = check_parity(model, tokenizer, prompt, **kw)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(f"{report.tokens_compared} tokens compared in {time.perf_counter() - t0:.1f}s")
        print(f"verdict: {report.verdict}")
    return 0 if report.identical else 1


def cmd_cost(args: argparse.Namespace) -> int:
    from .core.vocab import vocab_size  # imports mlx: see the top
    from .measure import proposal_cost, verify_cost_curve  # imports mlx: see the top

    model, tokenizer = load(args.model, dtype=args.dtype)
    curve = verify_cost_curve(model, args.max_len)
    step = curve[min(args.num_draft_tokens + 1, args.max_len)]
    vocab = vocab_size(model, tokenizer)
    drafts = {n: proposal_cost(NgramDrafter(1, 3), n, k=args.num_draft_tokens, vocab=vocab)
              for n in (1024, 8192)}
    ratio = {L: t / curve[1] for L, t in curve.items()}
    out = {
        "cost_ratio": ratio,
        "cost_1_ms": curve[1] * 1e3,
        "ngram_proposal_us": {n: t * 1e6 for n, t in drafts.items()},
        "ngram_proposal_fraction_of_verify": {n: t / step for n, t in drafts.items()},
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"cost(1) = {out['cost_1_ms']:.1f} ms")
    print("L  " + " ".join(f"{L:>5}" for L in curve))
    print("x  " + " ".join(f"{r:5.2f}" for r in ratio.values()))
    for n, t in drafts.items():
        print(f"ngram proposal at {n} tokens of context: {t * 1e6:.1f} us = "
              f"{t / step:.3%} of a k={args.num_draft_tokens} verify step")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ensure_openblas(argv)
    # transformers (used only for GGUF tokenizers) warns that torch is absent; we never need it.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    args = build_parser().parse_args(argv)
    try:
        handler = {"generate": cmd_generate, "parity": cmd_parity, "cost": cmd_cost,
                   "serve": cmd_serve, "bench": cmd_bench,
                   "train-drafter": cmd_train_drafter}[args.command]
        return handler(args)
    except (ValueError, FileNotFoundError, ModelLoadError) as e:
        print(f"specdec: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
