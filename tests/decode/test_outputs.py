"""What a drafter declares it wants from the verify forward (``Drafter.wants``): the hidden
states of layers [2, 15, 27] and the last layer's output (id 30, the final norm's input: what
MTP heads read) at every block row are exactly those a plain forward over the same
tokens gives (fp32, SmolLM2), the capture is undone after the step, and the tokens are plain
decoding's. WeDLM's tail rides the same mechanism (tests/drafters/test_wedlm.py)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from specdec.core.proposal import Proposal, Wants
from specdec.drafters.base import Drafter
from specdec.eagle.capture import capture_layers, decoder_layers
from specdec.engine import token_stream

LAYERS = (2, 15, 27, 30)  # SmolLM2-135M has 30 layers: id 30 is the last one's output
PROMPT = "List the first ten prime numbers, separated by commas:"


class Featured(Drafter):
    """Drafts from a script of the plain answer with every third draft wrong (so blocks are
    accepted whole, in part, or not at all) and keeps what each verify forward returned."""

    name = "featured"
    outputs = True

    def __init__(self, prompt: list[int], answer: list[int]):
        self.n, self.answer, self.seen = len(prompt), answer, []

    def propose(self, context, k):
        start = len(context) - self.n
        drafts = list(self.answer[start:start + k])
        if drafts and start % 3 == 0:
            drafts[-1] = (drafts[-1] + 1) % 1000
        return Proposal(drafts)

    def wants(self, context, drafts):
        block = [*context, *drafts]

        def read(returned):
            self.seen.append((block, returned.hidden))
            return list(returned.hidden.values())

        return Wants(read, layers=LAYERS)


def test_declared_hidden_states_are_a_plain_forwards_and_tokens_stay_plain(smollm):
    model, tok = smollm
    prompt = tok.encode(PROMPT)
    plain = [e.token for e in token_stream(model, prompt, max_tokens=8)]
    layers = list(decoder_layers(model))
    d = Featured(prompt, plain)
    out = [e.token for e in token_stream(model, prompt, drafter=d, max_tokens=8, num_draft_tokens=3)]
    assert out == plain
    assert decoder_layers(model) == layers  # the capture was undone
    assert len(d.seen) >= 3
    for block, hidden in d.seen[1:3]:  # blocks after a rollback (a wrong third draft)
        assert sorted(hidden) == list(LAYERS)
        with capture_layers(model, LAYERS) as cap:  # a plain forward over the same tokens
            mx.eval(model(mx.array([block])))
        rows = next(iter(hidden.values())).shape[0]  # the verify block: [last, *drafts]
        for i in LAYERS:
            want = np.array(cap.hidden[i][0, len(block) - rows:])
            assert hidden[i].dtype == mx.float32
            # fp32 noise of another block length grows with the layer's scale (the last: ~60)
            atol = 1e-4 * max(1.0, float(np.abs(want).max()) / 10)
            np.testing.assert_allclose(np.array(hidden[i]), want, rtol=1e-4, atol=atol)
