"""The OpenAI parameters clients send, without a model server: the accepted-and-ignored
list, refusals naming their parameter, ``chat_template_kwargs``, the default completion
length, reasoning in answers and streams, and the access log — the app in-process in front
of a scripted worker (the real SmolLM2 tokenizer, given a thinking chat template). The
think-block splitter itself: test_reasoning.py."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient
from transformers import AutoTokenizer

from specdec.core.text import encode_prompt
from specdec.server.http.app import create_app
from specdec.server.config import ServerConfig
from specdec.server.http.errors import APIError
from specdec.server.engine.events import DoneEvent, ErrorEvent, TokenEvent
from specdec.server.http.metrics import Metrics
from specdec.server.wires.chat_schemas import IGNORED_PARAMS, ChatCompletionRequest

from .test_reasoning import THINK_TEMPLATE

THOUGHT = ["<th", "ink>\nThe user", " greets me.\n</", "think>\n\nHello", "! How can I help?"]
MSG = [{"role": "user", "content": "hi"}]


# -- schemas -------------------------------------------------------------------------------


def test_the_ignored_list_is_accepted_and_documented():
    ignored = {"user": "u", "store": True, "metadata": {"k": "v"}, "service_tier": "auto",
               "safety_identifier": "s", "prompt_cache_key": "p", "verbosity": "low",
               "prediction": {"type": "content", "content": "x"}, "reasoning_effort": "high",
               "modalities": ["text"], "audio": None}
    assert set(IGNORED_PARAMS) == set(ignored) | {"stream_options.include_obfuscation"}
    body = {"model": "m", "messages": MSG, "stream": True,
            "stream_options": {"include_obfuscation": False}, **ignored}
    ChatCompletionRequest.model_validate(body)


def test_template_kwargs_and_reasoning_effort():
    body = {"model": "m", "messages": MSG, "reasoning_effort": "none"}
    assert ChatCompletionRequest.model_validate(body).template_kwargs(True) == {"enable_thinking": False}
    assert ChatCompletionRequest.model_validate(body).template_kwargs(False) == {}
    body["chat_template_kwargs"] = {"enable_thinking": True, "x": [1]}
    assert ChatCompletionRequest.model_validate(body).template_kwargs(True) == {"enable_thinking": True, "x": [1]}


@pytest.fixture(scope="module")
def smol_tok(smollm, tmp_path_factory):
    """SmolLM2's Hugging Face tokenizer, its own copy (tests set its chat template): saved
    and reloaded through public API rather than read out of mlx-lm's wrapper."""
    out = tmp_path_factory.mktemp("smol_tok")
    smollm[1].save_pretrained(str(out))
    return AutoTokenizer.from_pretrained(str(out))


def test_encode_prompt_passes_template_kwargs(smol_tok):
    tok = copy.copy(smol_tok)
    tok.chat_template = THINK_TEMPLATE
    plain = tok.decode(encode_prompt(tok, MSG))
    off = tok.decode(encode_prompt(tok, MSG, template_kwargs={"enable_thinking": False}))
    assert plain.endswith("assistant\n") and off.endswith("<think>\n\n</think>\n\n")
    tok.chat_template = "{{ raise_exception('no ' + flavour) }}"
    with pytest.raises(ValueError, match="chat template failed: no mint"):
        encode_prompt(tok, MSG, template_kwargs={"flavour": "mint"})


# -- the app in front of a scripted worker ------------------------------------------------


class ScriptedQueue:
    """The worker's queue, answered at once: what the batcher takes is scripted."""

    def __init__(self, worker):
        self.worker = worker

    def __len__(self):
        return 0

    def put_nowait(self, job):
        self.worker.answer(job)
        return True


class ScriptedWorker:
    """What ``app`` needs of ``InferenceWorker``: every job answers ``script`` (text
    pieces, one per token) and ends with ``ending``; ``refuse`` makes admission a 503. Its
    ``queue`` answers each job as it is put there (``admission.enqueue``)."""

    def __init__(self, tokenizer, script, context_length=200):
        self.tokenizer, self.tokenizer_lock = tokenizer, threading.Lock()
        self.context_length, self.vocab_size = context_length, len(tokenizer.get_vocab())
        self.draft, self.max_batch, self.busy, self.alive = None, 1, 0, True
        self.queue = ScriptedQueue(self)
        self.mtp = None  # no MTP block loaded (--draft-type mtp)
        self.one_at_a_time, self.model = None, None  # no weights: the script answers
        self.memory = SimpleNamespace(info=dict)
        self.kv, self.kv_reserved = None, 0  # no KV budget: nothing is cached
        self.limits = None  # mlx's memory limits untouched: no model
        self.script, self.ending, self.refuse, self.requests = script, DoneEvent("stop"), False, []

    def check_room(self):
        if self.refuse:
            raise APIError(503, "the request queue is full (1 waiting); retry in about 1 s",
                           code="queue_full", headers={"Retry-After": "1"})

    def queue_full(self):
        raise AssertionError("a scripted queue is never full")

    def answer(self, job):
        self.requests.append(job.request)
        for i, piece in enumerate(self.script):
            job.emit(TokenEvent(piece, i))
        job.emit(self.ending)

    def cancel(self, job):
        pass

    def stop(self, timeout=None):
        pass


@pytest.fixture
def think_tok(smol_tok):
    tok = copy.copy(smol_tok)
    tok.chat_template = THINK_TEMPLATE
    return tok


def serve(tokenizer, script=THOUGHT, **cfg):
    worker = ScriptedWorker(tokenizer, script)
    # TestClient sends "Host: testserver", which a loopback-bound server refuses unless allowed
    cfg = ServerConfig(**{"model": "m", "allowed_hosts": ("testserver",), **cfg})
    return TestClient(create_app(cfg, worker, Metrics())), worker


def post(client, path="/v1/chat/completions", **body):
    return client.post(path, json={"model": "m", "messages": MSG, **body})


def test_reasoning_content_whole_and_streamed(think_tok):
    client, _ = serve(think_tok)
    msg = post(client).json()["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "Hello! How can I help?",
                   "reasoning_content": "The user greets me."}
    lines = post(client, stream=True).text.split("\n\n")
    deltas = [json.loads(x[6:])["choices"][0]["delta"] for x in lines if x.startswith("data: {")]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "The user greets me."
    assert "".join(d.get("content") or "" for d in deltas) == "Hello! How can I help?"
    assert not any("think>" in (d.get("content") or "") + d.get("reasoning_content", "")
                   for d in deltas)


def test_a_prompt_that_opens_the_block_and_a_model_without_one(think_tok, smol_tok):
    client, worker = serve(think_tok, script=["Plan.", "</think>", "Done."])
    r = post(client, chat_template_kwargs={"open_think": True}).json()["choices"][0]["message"]
    assert (r["content"], r["reasoning_content"]) == ("Done.", "Plan.")
    plain, _ = serve(smol_tok)  # SmolLM2's template: no think block
    msg = post(plain).json()["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "".join(THOUGHT)}
    thinker, _ = serve(think_tok)
    r = thinker.post("/v1/completions", json={"model": "m", "prompt": "hi"})
    assert r.json()["choices"][0]["text"] == "".join(THOUGHT)  # completions are never split


def test_template_kwargs_and_reasoning_effort_reach_the_template(think_tok):
    client, worker = serve(think_tok)
    for body in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"},
                 {"reasoning_effort": "high"}):
        assert post(client, **body).status_code == 200
    closed = [think_tok.decode(r.prompt_ids).endswith("</think>\n\n") for r in worker.requests]
    assert closed == [True, True, False]
    r = post(client, chat_template_kwargs={"tokenize": False})
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs"


def test_max_tokens_default_runs_to_the_context(smol_tok):
    tok = smol_tok
    client, worker = serve(tok, script=["x"])
    for cap, body, want in ((None, {}, "room"), (None, {"max_tokens": 5}, 5),
                            (None, {"max_completion_tokens": 7}, 7)):
        assert post(client, **body).status_code == 200
        n = len(worker.requests[-1].prompt_ids)
        assert worker.requests[-1].gen.max_tokens == (200 - n if want == "room" else want)
    capped, worker = serve(tok, script=["x"], max_tokens=8)
    post(capped)
    post(capped, max_tokens=50)  # the operator's cap bounds what a client asks too
    post(capped, max_tokens=3)
    assert [r.gen.max_tokens for r in worker.requests] == [8, 8, 3]
    r = post(capped, max_tokens=200)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("body, param, needle", [
    ({"n": 2}, "n", "not implemented"),
    ({"modalities": ["text", "audio"]}, "modalities", "text only"),
    ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio", "text only"),
    ({"web_search_options": {}}, "web_search_options", "unknown parameter"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "json_object"),
    ({"logit_bias": {"49152": 1.0}}, "logit_bias", "vocabulary"),
    ({"logit_bias": {"9" * 5000: 1.0}}, "logit_bias", "vocabulary"),
    ({"logit_bias": {"²": 1.0}}, "logit_bias", "digits"),
    ({"presence_penalty": 3}, "presence_penalty", "2"),
    ({"store": "yes"}, "store", "boolean"),
])
def test_refusals_name_their_parameter(smol_tok, body, param, needle):
    client, _ = serve(smol_tok)
    err = post(client, **body).json()["error"]
    assert (err["param"], needle in err["message"]) == (param, True), err


def test_completions_refusals_name_their_parameter(smol_tok):
    client, _ = serve(smol_tok)
    for body, param in (({"echo": True}, "echo"), ({"best_of": 3}, "best_of")):
        r = client.post("/v1/completions", json={"model": "m", "prompt": "hi", **body})
        assert (r.status_code, r.json()["error"]["param"]) == (400, param)


# -- the access log ------------------------------------------------------------------------


def test_every_request_gets_one_access_line(smol_tok, caplog):
    client, worker = serve(smol_tok, script=["x"], api_key="k", max_body_bytes=2048)
    caplog.set_level(logging.INFO, logger="specdec.access")
    key = {"Authorization": "Bearer k"}
    chat = {"model": "m", "messages": MSG}
    calls = [
        (lambda: client.post("/v1/chat/completions", json=chat, headers=key), 200, None),
        (lambda: client.post("/v1/chat/completions", json={**chat, "bogus": 1}, headers=key),
         400, "bogus: unknown parameter"),
        (lambda: client.post("/v1/chat/completions", json=chat), 401, "API key is missing"),
        (lambda: client.get("/v1/nothing", headers=key), 404, "Unknown path"),
        (lambda: client.get("/v1/completions", headers=key), 405, "GET is not allowed"),
        (lambda: client.post("/v1/chat/completions", json={**chat, "user": "x" * 4000}, headers=key),
         413, "request body is"),
        (lambda: client.post("/v1/chat/completions", json={**chat, "model": "gpt"}, headers=key),
         404, "does not exist"),
        (lambda: client.get("/health"), 200, None),
    ]
    for call, status, reason in calls:
        caplog.clear()
        assert call().status_code == status
        lines = [r.getMessage() for r in caplog.records if r.name == "specdec.access"]
        assert len(lines) == 1, lines
        assert f" {status} " in lines[0] and lines[0].split()[2] == str(status)
        assert (reason is None) == ("reason=" not in lines[0]) and (reason or "") in lines[0]
    caplog.clear()
    worker.refuse = True
    assert client.post("/v1/chat/completions", json=chat, headers=key).status_code == 503
    worker.refuse = False
    worker.ending = ErrorEvent(APIError(500, "generation failed: boom\nsecond line"))
    client.post("/v1/chat/completions", json={**chat, "stream": True}, headers=key)
    lines = [r.getMessage() for r in caplog.records if r.name == "specdec.access"]
    assert 'reason="the request queue is full' in lines[0] and " 503 " in lines[0]
    assert lines[1].endswith('reason="generation failed: boom"') and " 200 " in lines[1]


# -- the edges: Host header, what the key guards, the operator's cap, template failures ----


def test_a_loopback_server_answers_loopback_host_names_only(smol_tok):
    client, _ = serve(smol_tok)
    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "testserver"):
        assert client.get("/health", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", ""):
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": MSG},
                        headers={"Host": host})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host", host
    public, _ = serve(smol_tok, host="0.0.0.0", allowed_hosts=())
    assert public.get("/health", headers={"Host": "my.server"}).status_code == 200


def test_the_key_guards_metrics_and_the_schema_and_accepts_x_api_key(smol_tok):
    client, _ = serve(smol_tok, api_key="k")
    for path in ("/metrics", "/openapi.json", "/docs", "/v1/models", "/api/tags"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer k"}).status_code == 200, path
    assert client.get("/v1/models", headers={"x-api-key": "k"}).status_code == 200
    assert client.get("/v1/models", headers={"x-api-key": "K"}).status_code == 401
    assert client.get("/health").status_code == 200  # open: a load balancer's probe
    open_client, _ = serve(smol_tok)
    assert open_client.get("/metrics").status_code == 200


def test_health_shows_no_paths(smol_tok):
    client, worker = serve(smol_tok)
    worker.memory = SimpleNamespace(info=lambda: {"file": "/home/me/secret/serve.mem", "saves": 2})
    assert client.get("/health").json()["memory"] == {"saves": 2}


def test_a_template_that_fails_on_the_messages_is_the_clients_400(smol_tok):
    tok = copy.copy(smol_tok)
    tok.chat_template = "{{ 1 / 0 }}"
    client, _ = serve(tok)
    r = post(client)
    assert r.status_code == 400
    assert "chat template cannot render" in r.json()["error"]["message"]


# -- admission: bounded inputs, the queue before any work, readers that stop reading ------


def test_inputs_past_the_limits_are_refused_naming_them(smol_tok):
    client, worker = serve(smol_tok)
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    many = [{**tool, "function": {**tool["function"], "name": f"f{i}"}} for i in range(129)]
    huge = {"type": "object", "description": "x" * (70 << 10)}
    for body, says in (({"stop": ["x" * 300]}, "at most 256 characters"),
                       ({"tools": many}, "at most 128"),
                       ({"response_format": {"type": "json_schema", "json_schema": {
                           "name": "d", "schema": deep}}}, "deeper than 32"),
                       ({"tools": [{**tool, "function": {"name": "g", "parameters": huge}}]},
                        "bytes; at most 65536")):
        r = post(client, **body)
        assert r.status_code == 400 and says in r.json()["error"]["message"], (says, r.text)
    assert worker.requests == []


def test_a_full_queue_refuses_before_the_prompt_is_even_read(smol_tok):
    tok = copy.copy(smol_tok)
    tok.chat_template = "{{ 1 / 0 }}"  # a prompt that would fail, if it were templated
    client, worker = serve(tok)
    worker.refuse = True
    assert post(client).status_code == 503


def test_a_reader_that_stops_reading_has_its_job_cancelled():
    from specdec.decode.generation import Generation
    from specdec.server.engine.events import MAX_PENDING_EVENTS, GenRequest, Job

    async def run():
        job = Job(GenRequest([1], Generation(max_tokens=10**6)), asyncio.get_running_loop())
        for i in range(MAX_PENDING_EVENTS + 500):  # the worker keeps emitting; nobody reads
            job.emit(TokenEvent("x", i))
        await asyncio.sleep(0)
        return job

    job = asyncio.run(run())
    assert job.cancelled.is_set() and job.events.qsize() == MAX_PENDING_EVENTS
