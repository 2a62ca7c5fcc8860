"""Acceptance of seeded (position-keyed) sampling against rejection sampling, same drafts.

Runs N requests each way and prints drafted / accepted tokens and tokens per verify step
(lab/seeded-acceptance/README.md). Requests without a seed take
rejection sampling; their key stream is fixed here (``Rng(i)`` for request i) so runs
repeat. Targets: a tiny random llama or gemma3 from ``tests/conftest.py`` on repetitive
prompts, or SmolLM2-135M on the demo prompt.

    python lab/seeded-acceptance/seeded_acceptance.py --target tiny-gemma3 --requests 200 --temp 0.7 --top-p 0.9
    python lab/seeded-acceptance/seeded_acceptance.py --target tiny-llama --drafter model --temp 0.8
    python lab/seeded-acceptance/seeded_acceptance.py --target smollm2-135m --requests 16 --max-tokens 32
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from specdec.core.sampling import Rng, SamplingParams  # noqa: E402
from specdec.core.stats import SpecStats  # noqa: E402
from specdec.engine import token_stream  # noqa: E402

MODES = {  # mode: (seeded, a draft model's keys coupled to the target's)
    "rejection": (False, False), "seeded": (True, True), "seeded-own-keys": (True, False)}


def target(name: str):
    """(model, prompt of request i)."""
    if name.startswith("tiny-"):
        from conftest import cached_tiny, repetitive_prompt

        return cached_tiny(name[5:]), lambda i: repetitive_prompt(i % 20, 40)
    from specdec.core.text import encode_prompt
    from specdec.loader import load
    from specdec.prompts import demo_prompt

    model, tok = load(name)
    ids = encode_prompt(tok, demo_prompt())
    return model, lambda i: ids


def drafter(kind: str, arch: str, temp: float, seed: int, coupled: bool):
    from specdec.drafters import NgramDrafter
    from specdec.drafters.draft_model import DraftModelDrafter

    if kind == "ngram":
        return NgramDrafter(1, 3)
    from drafters.test_draft_model import near_draft  # the target's weights + 2 % noise

    return DraftModelDrafter(near_draft(arch), temperature=temp, seed=seed, coupled=coupled)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="tiny-gemma3")
    ap.add_argument("--drafter", choices=["ngram", "model"], default="ngram")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--temp", type=float, default=0.5)
    ap.add_argument("--top-p", type=float, default=1.0)
    args = ap.parse_args()
    model, prompt = target(args.target)
    modes = MODES if args.drafter == "model" else {m: MODES[m] for m in ("rejection", "seeded")}
    for mode, (seeded, coupled) in modes.items():
        drafted = accepted = steps = tokens = 0
        for i in range(args.requests):
            params = SamplingParams(args.temp, args.top_p, seed=i if seeded else None)
            d, stats = drafter(args.drafter, args.target[5:], args.temp, i, coupled), SpecStats()
            with mock.patch("specdec.decode.request.Rng", lambda s, i=i: Rng(i)):
                for _ in token_stream(model, prompt(i), drafter=d, max_tokens=args.max_tokens,
                                      num_draft_tokens=4, sampling=params, stats=stats):
                    pass
            drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
            steps, tokens = steps + stats.verify_steps, tokens + stats.generated_tokens
        print(f"{mode}: drafted {drafted}, accepted {accepted} ({accepted / max(drafted, 1):.1%}), "
              f"{tokens / max(steps, 1):.3f} tokens/step", flush=True)

if __name__ == "__main__":
    main()
