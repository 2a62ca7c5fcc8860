"""The OpenAI parameters real clients send, through a real `specdec serve` (SmolLM2-135M,
its default drafter, a 160-token context): penalties and logit_bias exact under
speculation, the accepted-and-ignored fields changing nothing, refusals naming their
parameter, no ``max_tokens`` meaning "to EOS or the context", and one access-log line per
request in the server's log."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from serverproc import MODEL, Server, wait_for

pytestmark = pytest.mark.slow  # a server process on a real model

CONTEXT = 160
ECHO = ("def area(w, h):\n    return w * h\n\n" * 4).strip()  # a prompt the answer copies
PENALTIES = dict(presence_penalty=0.6, frequency_penalty=0.4, logit_bias={"28": -5.0, "314": 3.0})


@pytest.fixture(scope="module")
def server():
    s = Server("--context-length", str(CONTEXT))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


def tokens(choice, chat):
    lp = choice.logprobs
    pairs = [(t.token, t.logprob) for t in lp.content] if chat else zip(lp.tokens, lp.token_logprobs)
    return [(t, round(x, 3)) for t, x in pairs]


@pytest.mark.parametrize("chat", [True, False])
def test_penalties_and_logit_bias_are_exact_under_speculation(client, chat):
    """Greedy with presence and frequency penalties and a logit bias: the speculative
    answer equals ``draft_type: none`` token for token (log-probabilities too)."""
    def ask(draft_type="suffix", gate=False, **kw):
        # the gate off: the penalties must hold where tokens really are drafted and verified
        extra = {"speculative": {"draft_type": draft_type, "gate": gate}}
        if chat:
            return client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Repeat this code:\n" + ECHO}],
                max_tokens=24, temperature=0, logprobs=True, extra_body=extra, **kw)
        return client.completions.create(model=MODEL, prompt=ECHO + "\n\n", max_tokens=24,
                                         temperature=0, logprobs=1, extra_body=extra, **kw)

    spec, plain = ask(**PENALTIES), ask("none", **PENALTIES)
    assert tokens(spec.choices[0], chat) == tokens(plain.choices[0], chat)
    assert spec.usage.model_extra["accepted_tokens"] > 0
    assert tokens(spec.choices[0], chat) != tokens(ask(gate=True).choices[0], chat)  # they do act


def test_ignored_parameters_change_nothing(client):
    msgs = [{"role": "user", "content": "Name three colours."}]
    kw = dict(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
    base = client.chat.completions.create(**kw).choices[0].message.content
    ignored = client.chat.completions.create(
        **kw, store=True, metadata={"team": "a"}, user="u1", service_tier="auto",
        reasoning_effort="low", modalities=["text"], safety_identifier="s", prompt_cache_key="k",
        prediction={"type": "content", "content": "Red, green, blue."},
        extra_body={"verbosity": "low", "chat_template_kwargs": {"enable_thinking": False}})
    assert ignored.choices[0].message.content == base
    msg = ignored.choices[0].message
    assert getattr(msg, "reasoning_content", None) is None  # SmolLM2's template: no think block


def test_refusals_name_their_parameter(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    cases = [({"n": 2}, "n"), ({"modalities": ["text", "audio"]}, "modalities"),
             ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
             ({"extra_body": {"chat_template_kwargs": {"tokenize": True}}}, "chat_template_kwargs"),
             ({"response_format": {"type": "json_schema"}}, "response_format")]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(**kw, **extra)
        assert e.value.body["param"] == param, (extra, e.value.body)


def test_no_max_tokens_runs_to_the_context(client):
    """No ``max_tokens``: up to the context's last token, speculating to the edge (that
    no 256-token default cuts it is tested in-process: test_server_params_units)."""
    r = client.completions.create(model=MODEL, prompt=ECHO, temperature=0,
                                  extra_body={"speculative": {"draft_type": "suffix"}})
    u = r.usage
    if r.choices[0].finish_reason == "length":
        assert u.prompt_tokens + u.completion_tokens == CONTEXT
        assert u.model_extra["accepted_tokens"] > 0
    else:  # the model ended by itself: then no limit cut it
        assert r.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=ECHO, max_tokens=CONTEXT)
    assert e.value.body["code"] == "context_length_exceeded"


def test_every_request_gets_one_access_log_line(server):
    """The server's own log: one line per request, refused ones with their reason."""
    mark = "zz-access-" + str(id(server))
    with server.http() as h:
        calls = [h.post("/v1/chat/completions", json={"model": MODEL, "messages": [], mark: 1}),
                 h.get(f"/v1/{mark}"),
                 h.post("/v1/completions", json={"model": mark, "prompt": "x"}),
                 h.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1,
                                                 "user": mark})]
    assert [c.status_code for c in calls] == [400, 404, 404, 200]
    want = [("POST /v1/chat/completions 400", "reason="), (f"GET /v1/{mark} 404", "Unknown path"),
            ("POST /v1/completions 404", f"The model '{mark}' does not exist"),
            ("POST /v1/completions 200", "")]

    def lines():
        return [ln for ln in server.log().splitlines() if re.search(r" (GET|POST) /", ln)]

    wait_for(lambda: any("POST /v1/completions 200" in ln for ln in lines()[-2:]), 10,
             "the last access line")
    tail = lines()[-4:]
    for line, (head, reason) in zip(tail, want):
        assert head in line and reason in line and re.search(r" \d+\.\d{3}s client=127\.0\.0\.1:", line), line
    assert "reason=" not in tail[3]
    assert httpx.get(server.base + "/health").status_code == 200


def test_a_seed_pins_the_text_whatever_the_drafter_batched_or_alone(client):
    """issue #24: the same seeded request gives one text, equal to ``draft_type: none``'s,
    for every drafter, alone and as concurrent (batched) rows; the suffix history grows
    between the requests (the drafts change, the text must not)."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(kind):
        # "ngram"/"suffix" with the gate off (drafts verified at every step), "default" as
        # the server's default drafting (gated) and "none"
        spec = {"default": {}, "none": {"draft_type": "none"}}.get(kind, {"draft_type": kind, "gate": False})
        r = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Repeat this code:\n" + ECHO}],
            max_tokens=20, temperature=0.9, top_p=0.95, seed=11, extra_body={"speculative": spec})
        return r.choices[0].message.content, r.usage.model_extra["accepted_tokens"]

    ref, _ = ask("none")
    kinds = ["ngram", "suffix", "default", "none"]
    alone = [ask(d) for d in kinds]
    with ThreadPoolExecutor(len(kinds)) as pool:
        together = list(pool.map(ask, kinds))
    assert [t for t, _ in alone + together] == [ref] * (2 * len(kinds))
    assert sum(a for _, a in alone + together) > 0  # drafts were accepted
    other = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Repeat this code:\n" + ECHO}],
        max_tokens=20, temperature=0.9, top_p=0.95, seed=12)
    assert other.choices[0].message.content != ref  # the seed matters
