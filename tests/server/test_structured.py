"""Structured output through `specdec serve` with the OpenAI SDK: ``parse`` with a pydantic
model, ``json_object`` streamed, batched constrained requests, and every answer equal to
plain constrained decoding (``"speculative": {"draft_type": "none"}``).

One server (SmolLM2-135M, ``grammar,suffix`` drafting, batching on) serves the module."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field
from serverproc import MODEL

pytestmark = pytest.mark.slow  # a server process on a real model


class Person(BaseModel):
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=130)
    city: Literal["Lyon", "Paris", "Oslo", "Lima"]


PROMPTS = ["Alice Smith is 34 and lives in Lyon. Give her as JSON.",
           "Bob, aged 51, moved to Oslo last year. JSON please.",
           "Carla (19) studies in Lima. Return a JSON record.",
           "Dan is 70 and retired to Paris. Describe him as JSON."]


@pytest.fixture(scope="module")
def server(smol):  # the package's shared server, default drafts (grammar,suffix)
    return smol


@pytest.fixture(scope="module")
def client(server):
    return server.openai()


def ask(client, prompt, draft_type=None, **kw):
    extra = {"speculative": {"draft_type": draft_type}} if draft_type else None
    kw.setdefault("temperature", 0)
    return client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": prompt}], response_format=Person,
        max_tokens=80, extra_body=extra, **kw)


def test_parse_returns_a_valid_model_equal_to_plain_constrained_decoding(client):
    r = ask(client, PROMPTS[0])
    plain = ask(client, PROMPTS[0], draft_type="none")
    person = r.choices[0].message.parsed
    assert isinstance(person, Person) and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == plain.choices[0].message.content
    assert r.usage.model_extra["accepted_tokens"] > 0  # the grammar's forced tokens at least


def test_batched_constrained_requests_each_equal_their_plain_answer(client):
    plain = [ask(client, p, draft_type="none").choices[0].message.content for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = list(pool.map(lambda p: ask(client, p).choices[0].message.content, PROMPTS))
    assert got == plain
    assert all(Person.model_validate_json(g) for g in got)


def test_json_object_streams_what_plain_constrained_decoding_writes(client):
    """A free-form object on a 135M model may run to max_tokens: then the text is a
    prefix of an object; when it stops, it parses."""
    kw = dict(model=MODEL, messages=[{"role": "user", "content": PROMPTS[1]}], max_tokens=60,
              response_format={"type": "json_object"}, temperature=0)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    plain = client.chat.completions.create(extra_body={"speculative": {"draft_type": "none"}}, **kw)
    assert text == plain.choices[0].message.content and text.startswith("{")
    if finish == ["stop"]:
        assert isinstance(json.loads(text), dict)


def test_sampled_constrained_answers_validate(client):
    for seed in range(4):
        r = ask(client, PROMPTS[2], temperature=1.0, seed=seed)
        assert isinstance(r.choices[0].message.parsed, Person)


def test_a_schema_the_grammar_cannot_take_is_a_400_naming_response_format(client):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                       response_format=bad, max_tokens=8)
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                       response_format={"type": "json_schema"}, max_tokens=8)


def test_penalties_logit_bias_and_a_schema_together_equal_plain_decoding(client):
    """The issue's exactness check: with presence and frequency penalties, a logit bias
    and a JSON schema, the speculative answer equals ``draft_type: none`` token for token
    (their logprobs too), and the parameters do change the target's distribution."""
    kw = dict(presence_penalty=0.6, frequency_penalty=0.4, logit_bias={"28": -5.0, "314": 3.0},
              logprobs=True)
    spec = ask(client, PROMPTS[3], **kw)
    plain = ask(client, PROMPTS[3], draft_type="none", **kw)
    tokens = lambda r: [(t.token, round(t.logprob, 3)) for t in r.choices[0].logprobs.content]  # noqa: E731
    assert tokens(spec) == tokens(plain) and spec.usage.model_extra["accepted_tokens"] > 0
    assert tokens(spec) != tokens(ask(client, PROMPTS[3], logprobs=True))
