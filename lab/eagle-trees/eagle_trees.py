"""Tokens per target forward of an EAGLE-3 head's dynamic trees against its linear drafts.

SmolLM2-135M, four chat prompts, greedy, every step drafting (no gate); each configuration's
tokens are asserted identical to plain decoding. Tokens per forward = emitted tokens / verify
steps (``step_log``). Wall times are printed too; on a shared CPU they are not a result.

    python lab/eagle-trees/eagle_trees.py /work/heads/smollm2 64
"""

import sys
import time

from specdec.core.stats import SpecStats
from specdec.drafters.spec import DraftSpec
from specdec.engine import token_stream
from specdec.loader import load
from specdec.resources import drafter_for

PROMPTS = ["Write a short story about a robot who learns to paint.",
           "Explain why the sky is blue in simple terms.",
           "Translate to French: The weather is nice today and we are going to the park.",
           "List three benefits of regular exercise and explain each one."]
CONFIGS = ((4, 0), (4, 8), (4, 12), (6, 16))  # (k, tree budget; 0 = linear)


def main(head_dir: str, n: int) -> None:
    model, tok = load("smollm2-135m")
    ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
           for p in PROMPTS]
    t = time.perf_counter()
    plain = [[e.token for e in token_stream(model, p, max_tokens=n)] for p in ids]
    print(f"plain: {time.perf_counter() - t:.1f}s", flush=True)
    for k, budget in CONFIGS:
        steps = emitted = 0
        t = time.perf_counter()
        for p, want in zip(ids, plain):
            drafter = drafter_for(DraftSpec("eagle", draft_model=head_dir, gate=False), model, tok)
            log: list[tuple[int, int]] = []
            out = [e.token for e in token_stream(model, p, drafter=drafter, max_tokens=n,
                                                 num_draft_tokens=k, tree_budget=budget,
                                                 step_log=log, stats=SpecStats())]
            assert out == want, (k, budget)
            steps += len(log)
            emitted += sum(a + 1 for _, a in log)
        print(f"k={k} budget={budget}: {emitted / steps:.3f} tokens/forward over {steps} steps, "
              f"{time.perf_counter() - t:.1f}s, identical", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 64)
