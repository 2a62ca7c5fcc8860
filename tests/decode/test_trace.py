"""decode.trace: one row per step a single stream yields, agreeing with the request's stats,
scoped to its ``with`` block and changing no token (SmolLM2, the default gated drafter)."""

import json

from specdec.decode import trace
from specdec.engine import generate

PROMPT = "Write the word 'hello' twenty times, separated by spaces."  # drafts after a paused start


def test_trace_rows_agree_with_the_stats(smollm, tmp_path):
    model, tok = smollm
    path = tmp_path / "t.jsonl"
    with trace.tracing(str(path)) as tracer:
        tracer.tag(case="list")
        res = generate(model, tok, PROMPT, max_tokens=32)
    assert trace.active() is None  # undone on exit: nothing traced after
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    s = res.stats
    assert len(rows) == s.verify_steps and rows[-1]["step"] == len(rows) - 1
    assert sum(r["accepted"] for r in rows) == s.accepted
    assert sum(r["k"] for r in rows) == s.drafted
    assert sum(r["emitted"] for r in rows) == len(res.tokens)
    assert {r["case"] for r in rows} == {"list"} and {r["request"] for r in rows} == {0}
    # the gate's decisions are on the rows: a paused start is a plain row (the start depends on
    # what earlier requests of the process carried: gate.CostGate.begin's priced start), and
    # drafted steps are priced before they ran
    assert rows[0]["plain"] == rows[0]["before"]["paused"]
    drafted = [r for r in rows if r["k"]]
    assert drafted and all(r["predicted_s"] > 0 and r["expected"] >= 1 for r in drafted)
    assert generate(model, tok, PROMPT, max_tokens=32).tokens == res.tokens
