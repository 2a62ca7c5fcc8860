"""Every wire replayed in-process from its golden pairs (issue #45 items 3 and 5): the requests
the real clients sent — the openai, anthropic and ollama SDKs, Claude Code, Codex — are sent
again to the app in front of the scripted worker (``golden.scripted_app``: no model, no
subprocess), and each reply must equal the recorded one byte for byte once ids and times are
normalised. A difference is a change every client of that wire sees: re-record on purpose
(``tests/server/golden/record.py``) and review the diff. One real-model smoke test per wire
stays in its own file (test_anthropic.py, test_responses.py, test_ollama.py, test_api.py)."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from .golden import cases, job_view, load, normalise, scripted_app
from .golden.record import CASES

CASE_FILES = cases()


def replay(case: dict) -> list[tuple[dict, dict]]:
    """Each recorded exchange's reply and the reply the app gives now, normalised alike;
    placeholders in a request are the ids this replay's own replies made."""
    app, worker = scripted_app(case["script"], case["ending"])
    ids: dict[str, str] = {}
    out = []
    with TestClient(app) as client:
        for x in case["exchanges"]:
            req = x["request"]
            real = {ph: real for real, ph in ids.items()}
            path, body = req["path"], req["body"]
            for ph, value in real.items():
                path, body = path.replace(ph, value), body.replace(ph, value)
            before = len(worker.requests)
            r = client.request(req["method"], path + (f"?{req['query']}" if req["query"] else ""),
                               headers=req["headers"], content=body.encode())
            got = {"status": r.status_code, "content_type": r.headers.get("content-type", ""),
                   "body": normalise(r.text, ids),
                   "jobs": json.loads(normalise(json.dumps(
                       [job_view(j, worker.tokenizer) for j in worker.requests[before:]]), ids))}
            out.append(({**x["reply"], "jobs": x["jobs"]}, got))
    return out


def test_every_client_case_is_recorded():
    assert {p.stem for p in CASE_FILES} == set(CASES)


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_the_wire_answers_the_real_client_as_recorded(path):
    case = load(path)
    assert case["exchanges"], "an empty recording proves nothing"
    for i, (want, got) in enumerate(replay(case)):
        assert got == want, f"{path.name} exchange {i}: {case['exchanges'][i]['request']['path']}"


def test_the_replay_would_see_a_changed_reply():
    """The comparison can fail: a different script changes the bytes of every 200."""
    case = load(next(p for p in CASE_FILES if p.stem == "openai_chat"))
    changed = replay({**case, "script": ["Bye", "."]})
    assert [w == g for w, g in changed] == [False, False, True]  # the 400 does not depend on it
    assert json.loads(changed[0][1]["body"])["choices"][0]["message"]["content"] == "Bye."
