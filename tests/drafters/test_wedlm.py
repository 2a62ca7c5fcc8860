"""The WeDLM drafter's cache follows its context incrementally (issue #37): one drafter
across requests whose prompts share a prefix, or not, keeps AR parity and holds exactly
the context it has seen (tiny random-weight model, fp32 on CPU)."""

from __future__ import annotations

from specdec.core.wedlm import WedlmSettings
from specdec.drafters.wedlm import WedlmDrafter
from specdec.engine import token_stream
from decode.test_wedlm import MASK, PROMPT, ar, tiny


def test_one_drafter_across_requests_keeps_parity_and_its_cache_exact():
    model = tiny()
    d = WedlmDrafter(model, WedlmSettings(mask_token_id=MASK, entropy_threshold=float("inf")))
    prompts = [PROMPT, PROMPT[:4] + [50, 51], PROMPT[:4] + [50, 51, 52], [9, 8, 7]]
    for prompt in prompts:
        out = [e.token for e in token_stream(model, prompt, drafter=d, max_tokens=20,
                                             num_draft_tokens=4)]
        assert out == ar(model, prompt, n=20), prompt
        held = d.cached_tokens  # the context of its last proposal: prompt + output so far
        assert held == (prompt + out)[:len(held)] and len(held) > len(prompt)
    d.begin(prompts[0])  # back to a prompt sharing only 4 tokens: trimmed, then refed
    assert d.cached_tokens == prompts[0]
    assert d.cache[0].offset == len(prompts[0])
