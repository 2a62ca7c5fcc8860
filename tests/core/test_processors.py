"""``specdec.core.processors``: the processor chain over verify rows equals mlx-lm's own
processors row by row (the oracle); order, the bias's bounds, short windows."""

import mlx.core as mx
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.core.processors import (FrequencyPenalty, LogitBias, PresencePenalty, RepetitionPenalty,
                                     processors_for)
from specdec.core.sampling import SamplingParams


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(0, 11), min_size=0, max_size=30), st.lists(st.integers(0, 11), max_size=5),
       st.floats(-2, 2), st.floats(-2, 2), st.floats(0.5, 2.0), st.integers(1, 8))
def test_processors_match_mlx_lm_make_logits_processors(context, seen, presence, frequency, rep, size):
    """Our processors (vectorised over verify rows) give exactly what mlx-lm's own
    ``make_logits_processors`` gives for each row's full history (the oracle)."""
    from mlx_lm.sample_utils import make_logits_processors

    from specdec.core.processors import processors_for

    bias = {1: 2.0, 5: -1.5}
    params = SamplingParams(repetition_penalty=rep, repetition_context_size=size,
                            presence_penalty=presence, presence_context_size=size + 1,
                            frequency_penalty=frequency, frequency_context_size=size + 2,
                            logit_bias=bias)
    rows = [seen[:i] for i in range(len(seen) + 1)]
    logits = mx.random.normal((len(rows), 12), key=mx.random.key(len(context)))
    ours = logits
    for proc in processors_for(params):
        ours = proc(ours, context, rows)
    theirs = []
    procs = make_logits_processors(bias, rep, size, presence, size + 1, frequency, size + 2)
    for i, r in enumerate(rows):
        row = logits[i : i + 1]
        history = mx.array(context + r, dtype=mx.int32)
        for proc in procs:
            row = proc(history, row)
        theirs.append(row)
    assert mx.allclose(ours, mx.concatenate(theirs), atol=1e-6).item()


def test_the_chain_is_empty_by_default_and_in_mlx_lms_order():
    assert processors_for(SamplingParams()) == []
    chain = processors_for(SamplingParams(frequency_penalty=0.1, presence_penalty=0.2,
                                          repetition_penalty=1.1, logit_bias={3: 1.0}))
    assert [type(p) for p in chain] == [LogitBias, RepetitionPenalty, PresencePenalty, FrequencyPenalty]
    assert all(p.pipelined and not p.stateful for p in chain)


def test_a_bias_beyond_the_vocabulary_says_so():
    bias = LogitBias([(2, 1.0), (7, -1.0)])
    assert bias(mx.zeros((1, 8)), [], [[]]).tolist() == [[0, 0, 1, 0, 0, 0, 0, -1]]
    with pytest.raises(ValueError, match="logit_bias names token id 7, beyond the model's 4 logits"):
        bias(mx.zeros((1, 4)), [], [[]])


def test_rows_shorter_than_the_window_are_penalised_on_what_they_have():
    out = PresencePenalty(1.0, 3)(mx.zeros((3, 4)), [], [[], [2], [2, 0, 3, 1]])
    assert out.tolist() == [[0, 0, 0, 0], [0, 0, -1, 0], [-1, -1, 0, -1]]
