"""An ``Api`` without a model server, for tests of the routes' translation: a real (word-level)
tokenizer with a chat template, the served config, and the model the worker would hold."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec.server.engine.api import Api
from specdec.server.config import ServerConfig

PLAIN_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
TOOLS_TEMPLATE = "{% if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}" + PLAIN_TEMPLATE


def word_tokenizer(template: str | None = PLAIN_TEMPLATE) -> PreTrainedTokenizerFast:
    words = ["<unk>", "<eos>", "user", "assistant", ":", "hi", "hello"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    hf.chat_template = template
    return hf


@dataclass
class Worker:
    """What ``Api`` reads of ``InferenceWorker`` before any request runs."""

    tokenizer: Any
    model: Any = None
    context_length: int = 2048
    tokenizer_lock: threading.Lock = field(default_factory=threading.Lock)


def tiny_api(template: str | None = PLAIN_TEMPLATE, model: Any = None, **cfg: Any) -> Api:
    return Api(ServerConfig(**cfg), Worker(word_tokenizer(template), model))
