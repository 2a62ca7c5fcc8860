"""Golden request/reply pairs of the wires (issue #45 item 3), recorded from the real clients by
``record.py`` and replayed in-process by ``tests/server/test_golden.py``.

One JSON file per client case: ``script`` (the text pieces the scripted worker answers each
job with, one per token) and ``ending`` (its finish reason), then ``exchanges``: each request
as the client sent it (method, path, query, the headers that matter, body) and our reply
(status, content type, body) and the engine requests it made (``job_view``), ids and times
normalised by ``normalise``. Ids our server made
are placeholders (``<resp_1>``), in requests too (a client sends back the ids it was given),
so a replay substitutes the ids its own replies made."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from specdec.server.config import ServerConfig
from specdec.server.engine.events import DoneEvent, TokenEvent
from specdec.server.http.app import create_app
from specdec.server.http.metrics import Metrics

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ..test_app import ScriptedWorker

GOLDEN = Path(__file__).resolve().parent
KEY = "golden-key"
# renders tools and past calls, not their ids, as Qwen's and most templates do (so tool calls are
# planned, and the golden prompts show what each wire made of them) and names Hermes'
# <tool_call> (the call format)
TEMPLATE = ("{% if tools %}<tools>{{ tools | tojson }}</tools> <tool_call>\n{% endif %}"
            "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}"
            "{% if m.tool_calls %} {{ m.tool_calls | map(attribute='function') | list | tojson }}{% endif %}{{ '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
CONTEXT = 1 << 17  # room for a CLI's max_tokens (Claude Code asks 32000)
# the request headers a wire reads (or a client always sends: its identity); the rest vary
REQUEST_HEADERS = ("content-type", "accept", "authorization", "x-api-key", "anthropic-version",
                   "anthropic-beta", "user-agent")
# ids our server makes: a placeholder per distinct id, numbered in order of first appearance
OUR_IDS = re.compile(r"\b(chatcmpl|cmpl|msg|resp|call|toolu|fc|rs|item)[-_][A-Za-z0-9]{6,}\b")
TIMES = re.compile(r'("(?:created|created_at|modified_at|expires_at|completed_at)"\s*:\s*)'
                   r'(\d+(?:\.\d+)?|"\d{4}-[^"]*")'
                   r'|("(?:total|load|prompt_eval|eval)_duration"\s*:\s*)(\d+)')


def byte_tokenizer(template: str = TEMPLATE) -> PreTrainedTokenizerFast:
    """A real tokenizer, built here (no download): one token per UTF-8 byte, so a prompt
    decodes back to its exact text (the golden files keep the prompt each wire rendered)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(["<unk>", "<eos>", *alphabet])},
                               merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    hf.chat_template = template
    return hf


class GoldenWorker(ScriptedWorker):
    """``ScriptedWorker`` whose last event carries usage and timings shaped as the real
    worker's (``engine.replies.done_event``), with fixed numbers: the wires' usage mapping
    is part of their bytes."""

    def answer(self, job):
        self.requests.append(job.request)
        top = job.request.gen.top_logprobs
        for i, piece in enumerate(self.script):
            if job.request.gen.logprobs:  # what the real worker adds when asked (or a wire asks)
                alts = [(piece, -0.25), *[(" x", -3.0)] * (top - 1)][:top]
                job.emit(TokenEvent(piece, i, -0.25, piece, alts))
            else:
                job.emit(TokenEvent(piece, i))
        n, k = len(job.request.prompt_ids), len(self.script)
        usage = {"prompt_tokens": n, "completion_tokens": k, "total_tokens": n + k,
                 "drafted_tokens": 4, "accepted_tokens": 3, "acceptance_rate": 0.75,
                 "mean_acceptance_length": 1.5, "decode_steps": 2, "draft_steps": 2,
                 "prompt_tokens_details": {"cached_tokens": 1}}
        timings = {"draft_type": "suffix", "queue_s": 0.001, "ttft_s": 0.01, "prefill_s": 0.005,
                   "decode_tokens_per_s": 100.0}
        job.emit(DoneEvent(self.ending, "", usage, timings))


def scripted_app(script: list[str], ending: str = "stop", template: str = TEMPLATE):
    """The real app (every wire) in front of a worker that answers ``script``; no model."""
    worker = GoldenWorker(byte_tokenizer(template), list(script), context_length=CONTEXT)
    worker.ending = ending
    cfg = ServerConfig(model="m", model_alias=("claude-*", "gpt-*"), api_key=KEY,
                       allowed_hosts=("testserver",))
    return create_app(cfg, worker, Metrics()), worker


# what a wire decides of the engine's request value (the same on every wire for the same ask);
# the one place to follow a rename of its fields (then re-record)
JOB_FIELDS = ("max_tokens", "stop", "logprobs", "top_logprobs", "response_format")


def job_view(request, tokenizer) -> dict:
    """The engine request a wire made, as the golden file keeps it: the prompt as text, the
    fields above, and the sampling values that differ from the defaults."""
    gen = request.gen  # the one value (``decode.generation.Generation``)
    sampling = gen.sampling
    changed = {f.name: getattr(sampling, f.name) for f in dataclasses.fields(sampling)
               if getattr(sampling, f.name) != f.default}
    view = {"prompt": tokenizer.decode(request.prompt_ids)}
    view.update({k: getattr(gen, k) for k in JOB_FIELDS})
    view["stop"] = list(gen.stop) or None  # as recorded: no stop strings is null
    view["store"] = request.store
    return json.loads(json.dumps({**view, "sampling": changed}))


def normalise(text: str, ids: dict[str, str]) -> str:
    """``text`` with our ids as placeholders (``ids`` maps each seen id to its own; new ones
    are added) and times as 0: what stays equal between two runs of the same exchange."""
    def placeholder(m: re.Match) -> str:
        if m.group(0) not in ids:
            n = sum(v[1:].rsplit("_", 1)[0] == m.group(1) for v in ids.values())
            ids[m.group(0)] = f"<{m.group(1)}_{n + 1}>"
        return ids[m.group(0)]

    text = OUR_IDS.sub(placeholder, text)
    return TIMES.sub(lambda m: (m.group(1) or m.group(3)) + "0", text)


def known_ids(text: str, ids: dict[str, str]) -> str:
    """``text`` (a request) with the ids in ``ids`` (real -> placeholder) replaced."""
    for real, ph in sorted(ids.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, ph)
    return text


def cases() -> list[Path]:
    return sorted(GOLDEN.glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())
