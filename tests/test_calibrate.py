"""Ready at once (issue #24 part 3): the verify cost curve of an unseen model is measured
a forward at a time in idle moments (``calibrate.Calibration``), so ``specdec serve``
answers ``/health`` within seconds and serves requests meanwhile, then caches the curve."""

from __future__ import annotations

import json

import pytest
from conftest import cached_tiny

from specdec.calibrate import Calibration
from specdec.measure import cached_cost_curve, cost_curve_path, model_fingerprint, store_cost_curve


def test_calibration_measures_every_length_a_forward_at_a_time_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    model = cached_tiny("llama")
    assert cached_cost_curve(model, [1, 2, 5]) is None  # nothing cached: nothing measured
    cal = Calibration(model, [5, 1, 2], repeats=2, context=32)
    steps = 0
    while not cal.step():
        steps += 1
        assert 0 < cal.progress < 1
        # a first estimate once the warm-up round and one counted round are done
        assert (cal.estimate() is not None) == (steps >= 2 * 3)
    # warm-up round + 2 repeats, every length; 2 more per round where the floors dip (up to 3)
    assert steps + 1 == cal.total in (3 * 3, 5 * 3, 7 * 3)
    assert sorted(cal.curve) == [1, 2, 5] and all(t > 0 for t in cal.curve.values())
    cal.store()
    assert cached_cost_curve(model, [1, 2, 5]) == cal.curve
    assert cached_cost_curve(model, [1, 2, 5, 8]) is None  # a length it lacks
    store_cost_curve(model, {8: 1.0})  # merged over what is cached
    assert cached_cost_curve(model, [1, 2, 5, 8]) == {**cal.curve, 8: 1.0}
    assert cost_curve_path(model) == tmp_path / "cost" / f"{model_fingerprint(model)}-floor.json"
    assert cost_curve_path(model).exists()


@pytest.mark.slow  # a server process
def test_serve_is_ready_at_once_on_a_model_it_has_never_seen(tmp_path):
    """No cost curve cached (a fresh cache directory): the server is up before the curve is
    measured (the request's log line comes first; no timed assertion: a loaded host only
    delays both), a request is answered while the curve is measured (greedy, equal to plain), and the curve
    is then cached for the next start. The model is a tiny random-weight qwen2 directory
    (``hybrid_tiny.save_dir``): start, calibration and caching do not hang on the weights, and
    SmolLM2's 352 forwards up to 128 tokens were two minutes of CPU here; the tiny one's take
    seconds, still dozens of forwards (~0.3 s of them would outlast the request's arrival)."""
    import specdec
    from hybrid_tiny import save_dir
    from serverproc import Server, wait_for

    model = str(save_dir("qwen2", tmp_path / "qwen2"))
    messages = [{"role": "user", "content": "Count from 1 to 10."}]
    # the reference and the client's import before the server starts: the request then
    # arrives a moment after /health, not seconds of imports later
    plain = specdec.generate(*specdec.load(model, dtype="float32"), messages, drafter=None, max_tokens=16)
    import openai  # noqa: F401
    s = Server("--model", model, "--dtype", "float32", "--max-batch", "4",
               env={"SPECDEC_CACHE_DIR": str(tmp_path / "cache")})
    try:
        assert "until it is measured" in s.log()
        assert "batches of several requests decode plain" in s.log()  # unpriced, they lost
        r = s.openai().chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0)
        assert r.choices[0].message.content == plain.text and plain.text
        wait_for(lambda: "verify cost curve measured and cached" in s.log(), 600, "the calibration")
        log = s.log()
        # ready at once: the request was answered (its "done:" line) before the curve was
        # measured; calibration yields to requests, so this holds on any host a curve of
        # dozens of forwards takes longer to measure than one request takes to arrive
        assert log.index("until it is measured") < log.index("done: ")
        assert log.index("done: ") < log.index("verify cost curve measured and cached")
        assert "a first estimate prices batches" in s.log()
    finally:
        s.stop()
    curves = [p for p in (tmp_path / "cache" / "cost").glob("*.json")]
    assert curves and all(json.loads(p.read_text()) for p in curves)
