"""Malformed-request fuzzing against a real `specdec serve`: hypothesis generates bad
requests (broken JSON, wrong types, out-of-range values, unknown or missing fields,
unsupported values, unknown models, over-long completions); every one must be answered
4xx with an OpenAI-style error body on a connection that keeps working, and the server
must still serve a good request afterwards."""

from __future__ import annotations

import collections
import json
import string

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from serverproc import MODEL, Server

from specdec.server.wires.chat_schemas import ChatCompletionRequest, CompletionRequest

pytestmark = pytest.mark.slow  # server processes on a real model

N_CASES = 300
MAX_BODY = 4096
KEY = "fuzz-key"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
BASE = {CHAT: {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        COMPLETIONS: {"model": MODEL, "prompt": "hi", "max_tokens": 1}}

KNOWN = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
not_int = json_values.filter(lambda v: not isinstance(v, int) or isinstance(v, bool))
not_number = json_values.filter(lambda v: not isinstance(v, (int, float)) or isinstance(v, bool))
# (field, values that are invalid for it): wrong types and out-of-range numbers
BAD_FIELDS = {
    "model": json_values.filter(lambda v: v != MODEL),
    "max_tokens": not_int.filter(lambda v: v is not None) | st.integers(max_value=0)
    | st.integers(8200, 10**12),
    "temperature": not_number.filter(lambda v: v is not None) | st.floats(2.0001, 1e300)
    | st.floats(-1e300, -1e-9),
    "top_p": not_number.filter(lambda v: v is not None) | st.floats(1.0001, 1e9) | st.floats(-1e9, 0),
    "top_k": not_int.filter(lambda v: v is not None) | st.integers(max_value=-1),
    "min_p": st.floats(1.0001, 1e9) | st.floats(-1e9, -1e-9),
    "seed": st.integers(max_value=-1) | st.integers(min_value=2**63, max_value=2**70),
    "n": st.integers().filter(lambda v: v != 1) | st.text(max_size=3),
    "stream": json_values.filter(lambda v: not isinstance(v, bool)),
    "stop": st.lists(st.text(min_size=1, max_size=3), min_size=5, max_size=8) | st.just("")
    | st.integers() | st.lists(st.integers(), min_size=1, max_size=3),
    "presence_penalty": st.floats(2.0001, 1e9) | st.floats(-1e9, -2.0001) | not_number.filter(lambda v: v is not None),
    "logit_bias": st.dictionaries(st.text(min_size=1, max_size=4).filter(lambda k: not k.isdigit()),
                                  st.floats(-5, 5), min_size=1, max_size=2)
    | st.dictionaries(st.integers(0, 100).map(str), st.floats(100.01, 1e6), min_size=1, max_size=2)
    | st.dictionaries(st.integers(49152, 10**6).map(str), st.floats(-5, 5), min_size=1, max_size=2),
    "speculative": st.fixed_dictionaries({"draft_type": st.text(max_size=12).filter(
        lambda t: t.strip() not in ("none", "ngram", "ngram-mod", "suffix", "grammar"))})
    | st.fixed_dictionaries({"num_draft_tokens": st.integers(max_value=0) | st.integers(33, 10**6)})
    | st.dictionaries(st.sampled_from(["bogus", "kk"]), json_values, min_size=1)
    | json_values.filter(lambda v: not isinstance(v, dict) and v is not None),
}
CHAT_BAD = {
    "messages": st.just([]) | json_values.filter(lambda v: not isinstance(v, list))
    | st.lists(st.fixed_dictionaries({"role": st.text(max_size=8).filter(
        lambda r: r not in ("system", "developer", "user", "assistant", "tool")), "content": st.text(max_size=5)}),
        min_size=1, max_size=2)
    | st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": st.integers() | st.none()}),
               min_size=1, max_size=2),
    "top_logprobs": st.integers(21, 10**6) | st.integers(max_value=-1),
    "logprobs": json_values.filter(lambda v: not isinstance(v, bool) and v is not None),
}
COMPLETION_BAD = {
    "prompt": st.just([]) | st.lists(st.text(max_size=3), min_size=2, max_size=3)
    | st.lists(st.integers(min_value=49152), min_size=1, max_size=3) | st.integers() | st.none(),
    "logprobs": st.integers(6, 100) | st.integers(max_value=-1),
    "echo": st.just(True),
    "best_of": st.integers(2, 5),
}


@st.composite
def bad_field(draw):
    path = draw(st.sampled_from([CHAT, COMPLETIONS]))
    table = {**BAD_FIELDS, **(CHAT_BAD if path == CHAT else COMPLETION_BAD)}
    name = draw(st.sampled_from(sorted(table)))
    body = {**BASE[path], name: draw(table[name]), "stream": draw(st.booleans())}
    if name == "stream":
        body["stream"] = draw(table["stream"])
    return "POST", path, json.dumps(body).encode(), "application/json", KEY


@st.composite
def bad_shape(draw):
    path = draw(st.sampled_from([CHAT, COMPLETIONS]))
    kind = draw(st.sampled_from(["extra", "missing", "not_object", "broken_json", "wrong_type",
                                 "unknown_model", "unknown_path", "wrong_method", "oversized",
                                 "bad_key"]))
    body = dict(BASE[path])
    if kind == "unknown_model":
        body["model"] = draw(st.text(max_size=20).filter(lambda m: m != MODEL))
    elif kind == "oversized":
        body["user"] = "x" * draw(st.integers(MAX_BODY, 4 * MAX_BODY))
    elif kind == "unknown_path":
        path = draw(st.sampled_from(["/v1/", "/v2/chat/completions", "/v1/embeddings", "/x"]))
    if kind == "extra":
        key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in KNOWN))
        body[key] = draw(json_values)
    elif kind == "missing":
        del body[draw(st.sampled_from(["model", "messages" if path == CHAT else "prompt"]))]
    if kind == "not_object":
        raw = json.dumps(draw(json_values.filter(lambda v: not isinstance(v, dict)))).encode()
    elif kind == "broken_json":
        raw = json.dumps(body).encode()[: -draw(st.integers(1, 5))] + draw(st.binary(max_size=4))
    else:
        raw = json.dumps(body).encode()
    ctype = draw(st.sampled_from(["text/plain", "application/x-www-form-urlencoded"])) \
        if kind == "wrong_type" else "application/json"
    key = KEY
    if kind == "bad_key":  # a wrong key, or none (None: no header)
        key = draw(st.none() | st.text(string.ascii_letters + string.digits, min_size=1, max_size=12)
                   .filter(lambda k: k != KEY))
    return ("GET" if kind == "wrong_method" else "POST"), path, raw, ctype, key


@pytest.fixture(scope="module")
def server():
    s = Server("--queue-size", "4", "--max-body-bytes", str(MAX_BODY), api_key=KEY)
    yield s
    s.stop()


def test_bad_requests_get_4xx_openai_errors(server):
    statuses: collections.Counter = collections.Counter()
    codes: collections.Counter = collections.Counter()
    with httpx.Client(base_url=server.base, timeout=60) as http:  # one keep-alive connection

        @settings(max_examples=N_CASES, deadline=None, database=None, phases=[Phase.generate],
                  derandomize=True,  # the same cases every run: reproducible counts
                  suppress_health_check=list(HealthCheck))
        @given(st.one_of(bad_field(), bad_shape()))
        def one(case):
            method, path, raw, ctype, key = case
            auth = {"Authorization": f"Bearer {key}"} if key is not None else {}
            r = http.request(method, path, content=raw, headers={"Content-Type": ctype, **auth})
            statuses[r.status_code] += 1
            assert 400 <= r.status_code < 500, (path, raw, r.status_code, r.text)
            assert r.headers.get("connection") != "close", (path, r.status_code)  # kept alive
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["message"], err
            codes[err["code"]] += 1

        one()
    total = sum(statuses.values())
    print(f"\nfuzz: {total} bad requests, status codes {dict(sorted(statuses.items()))}, "
          f"error codes {dict(codes.most_common())}")
    assert total >= 200
    assert server.health()["status"] == "ok"
    r = server.openai().completions.create(model=MODEL, prompt="Hello", max_tokens=2)
    assert r.usage.completion_tokens == 2
    assert server.metric("specdec_requests_total") >= total  # every one was answered and counted
