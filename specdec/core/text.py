"""Prompt encoding and stop-string matching.

Contract: ``encode_prompt`` turns text, token ids or chat messages into ids (chat template
unless ``chat=False``; BOS as mlx-lm adds it; a template's refusal is a ``ValueError``);
``StopMatcher`` releases text only once it cannot begin a stop string, so a stop string split
across tokens or inside an accepted block is never emitted, nor anything after it;
``TextOut.feed(token)`` -> (text, stopped). Tests: tests/core/test_text.py,
tests/core/test_verify.py,
tests/core/test_sampling.py. Details: docs/verify-and-rollback.md#text-and-stop-sequences."""

from __future__ import annotations

from typing import Any, Sequence

from jinja2 import TemplateError


def _validate_messages(messages: Sequence[Any]) -> list[dict]:
    if not messages:
        raise ValueError("chat prompt has no messages")
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"chat message must be a dict with 'role' and 'content': {m!r}")
    return list(messages)


def encode_prompt(
    tokenizer: Any,
    prompt: str | Sequence[int] | Sequence[dict],
    *,
    system: str | None = None,
    chat: bool | None = None,
    template_kwargs: dict[str, Any] | None = None,
    tools: Sequence[dict] | None = None,
) -> list[int]:
    """Token ids for ``prompt`` (text, token ids, or chat messages)."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if isinstance(prompt, str):
        if chat is None:
            chat = has_template
        if not chat:
            if system:
                raise ValueError("--system needs a chat template; drop --raw or the system prompt")
            bos = getattr(tokenizer, "bos_token", None)
            add_special = bos is None or not prompt.startswith(bos)
            return list(tokenizer.encode(prompt, add_special_tokens=add_special))
        prompt = [{"role": "user", "content": prompt}]
        if system:
            prompt.insert(0, {"role": "system", "content": system})
    ids = [int(t) for t in prompt if isinstance(t, int)]
    if len(prompt) and len(ids) == len(prompt):
        return ids
    messages = _validate_messages(prompt)
    if not has_template:
        raise ValueError("this tokenizer has no chat template: pass a text prompt (completion)")
    extra = dict(template_kwargs or {}, **({"tools": list(tools)} if tools else {}))
    try:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            **extra)
    except TemplateError as e:
        raise ValueError(f"the model's chat template failed: {e}") from e
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns an encoding
        ids = ids["input_ids"]
    return [int(t) for t in ids]


class StopMatcher:
    """Holds back text that could be the beginning of a stop string.

    >>> m = StopMatcher(["END"])
    >>> m.feed("abc E"), m.feed("N"), m.feed("Dxyz")
    (('abc ', False), ('', False), ('', True))
    """

    def __init__(self, stops: Sequence[str] | None):
        self.stops = [s for s in (stops or []) if s]
        self.pending = ""

    def feed(self, segment: str) -> tuple[str, bool]:
        """Returns (text safe to emit, stopped)."""
        if not self.stops:
            return segment, False
        text = self.pending + segment
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.pending = ""
            return text[: min(hits)], True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), hold, -1):
                if text.endswith(s[:n]):
                    hold = n
                    break
        self.pending = text[len(text) - hold :]
        return text[: len(text) - hold], False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class TextOut:
    """One request's streamed text: its own detokenizer, cut at the first stop string."""

    def __init__(self, tokenizer: Any, stop: Sequence[str] | None):
        self.detok = tokenizer.detokenizer  # a fresh copy per access (mlx-lm)
        self.detok.reset()
        self.stopper = StopMatcher(stop)

    def feed(self, token: int) -> tuple[str, bool]:
        self.detok.add_token(token)
        return self.stopper.feed(self.detok.last_segment)

    def tail(self) -> str:
        self.detok.finalize()
        text, _ = self.stopper.feed(self.detok.last_segment)
        return text + self.stopper.flush()
