"""One rank of a test's mlx.distributed group (started by tests/test_distributed.py).

``parity MODEL MAX_TOKENS``: shard the model (a packaged name or a directory); rank 0
decodes the prompt plainly and with each drafter of ``DRAFTERS`` (ungated: every step
drafts) and prints ``RESULT {json}``.
``tiny TIMEOUT``: shard a tiny random qwen2 (same seed on every rank); rank 0 prints the
same kind of RESULT, then decodes forever printing ``PROGRESS n`` so that the test can
kill or stop a rank mid-request (rank 0 must then report and exit with status 3).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DRAFTERS = ("ngram", "suffix")

# periodic code: drafting from the context is accepted often, and rejected now and then
PROMPT = "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 2\n\ndef h(x):\n    return x +"


def drafter(name: str):
    """A fresh ungated drafter: no timed gate choice, so the drafts do not depend on load."""
    from specdec.drafters import NgramDrafter
    from specdec.drafters.suffix import SuffixDrafter

    return NgramDrafter(1, 3) if name == "ngram" else SuffixDrafter()


def runs(model, generate, max_tokens: int) -> dict:
    out = {}
    for name in (None, *DRAFTERS):
        res = generate(model, name, max_tokens)
        out[name or "plain"] = {"tokens": res[0], "drafted": res[1], "accepted": res[2]}
    return out


def parity(name: str, max_tokens: int) -> int:
    from specdec.distributed import load_sharded, run_sharded
    from specdec.engine import generate

    def gen(model, tokenizer, name, n):
        r = generate(model, tokenizer, PROMPT, drafter=name and drafter(name), max_tokens=n, chat=False)
        return r.tokens, r.stats.drafted, r.stats.accepted

    def body(model, tokenizer) -> int:
        print("RESULT " + json.dumps(runs(model, lambda m, d, n: gen(m, tokenizer, d, n),
                                          max_tokens)), flush=True)
        return 0

    return run_sharded(*load_sharded(name, "float32"), 120.0, body)


def tiny(timeout: float) -> int:
    from conftest import tiny_model

    from specdec.distributed import init_group, run_sharded, shard
    from specdec.drafters import NgramDrafter
    from specdec.engine import token_stream
    from specdec.core.stats import SpecStats

    group = init_group()
    model = tiny_model("qwen2", seed=3)
    shard(model, group)
    prompt = [5, 9, 13, 2, 7] * 5  # 25 tokens: longer than one message's inline part

    def gen(m, name, n):
        stats = SpecStats()
        d = drafter(name) if name else None
        toks = [e.token for e in token_stream(m, prompt, drafter=d, max_tokens=n, stats=stats,
                                              prefill_step_size=8)]
        return toks, stats.drafted, stats.accepted

    def body(m, _tokenizer) -> int:
        print("RESULT " + json.dumps(runs(m, gen, 40)), flush=True)
        n = 0
        while True:  # until the test kills or stops a rank
            for _ in token_stream(m, prompt, drafter=NgramDrafter(1, 3), max_tokens=200):
                n += 1
            print(f"PROGRESS {n}", flush=True)

    return run_sharded(group, model, None, timeout, body)


if __name__ == "__main__":
    mode = sys.argv[1]
    sys.exit(parity(sys.argv[2], int(sys.argv[3])) if mode == "parity" else tiny(float(sys.argv[2])))
