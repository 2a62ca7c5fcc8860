"""``specdec serve`` settings: one dataclass built from argparse and validated at start.

Contract: ``ServerConfig.from_args(namespace)`` raises ``ValueError`` naming the flag to
change. Drafter, sampling and dtype flags are checked by ``RunConfig.validate`` (the same
rules and messages as ``specdec generate``); the server's own flags here. ``speculation``
holds the defaults a request's ``speculative`` field overrides; ``temp`` ... ``min_p``
are the defaults of omitted sampling parameters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..config import RunConfig
from .schemas import MAX_DRAFT_TOKENS, Speculation

API_KEY_ENV = "SPECDEC_API_KEY"


@dataclass
class ServerConfig:
    model: str = "smollm2-135m"
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    dtype: str = "auto"
    draft_model: str | None = None
    memory_file: str | None = None
    save_interval: float = 60.0
    suffix_history: int = 32768
    queue_size: int = 64
    max_body_bytes: int = 4 << 20
    max_tokens: int = 256
    context_length: int | None = None
    temp: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    speculation: Speculation = field(default_factory=Speculation)

    @property
    def model_id(self) -> str:
        return self.served_model_name or self.model

    @classmethod
    def from_args(cls, ns: Any) -> ServerConfig:
        spec = Speculation(ns.draft_type, ns.num_draft_tokens, ns.ngram_min, ns.ngram_max,
                           ns.gate, ns.gate_threshold, ns.adaptive_k)
        own = {k: getattr(ns, k) for k in cls.__dataclass_fields__ if k != "speculation"}
        cfg = cls(**own, speculation=spec)
        if cfg.api_key is None:
            cfg.api_key = os.environ.get(API_KEY_ENV) or None
        cfg.validate()
        return cfg

    def validate(self) -> None:
        s = self.speculation
        RunConfig(
            model=self.model, max_tokens=self.max_tokens, draft_type=s.draft_type,
            num_draft_tokens=s.num_draft_tokens, ngram_min=s.ngram_min, ngram_max=s.ngram_max,
            temp=self.temp, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
            gate=s.gate, gate_threshold=s.gate_threshold, adaptive_k=s.adaptive_k,
            dtype=self.dtype,
            # requests may ask for draft_type "model" later, so the model may go unused now
            draft_model=self.draft_model if "model" in s.draft_type.split(",") else None,
        ).validate()
        if s.num_draft_tokens > MAX_DRAFT_TOKENS:
            raise ValueError(f"--num-draft-tokens must be <= {MAX_DRAFT_TOKENS}")
        checks = [
            (1 <= self.port <= 65535, "--port must be in 1..65535"),
            (self.queue_size >= 1, "--queue-size must be >= 1"),
            (self.max_body_bytes >= 1024, "--max-body-bytes must be >= 1024"),
            (self.save_interval >= 0, "--save-interval must be >= 0 (0 = only at shutdown)"),
            (self.suffix_history >= 0, "--suffix-history must be >= 0"),
            (self.context_length is None or self.context_length >= 2, "--context-length must be >= 2"),
            (self.temp <= 2, "--temp must be <= 2 (the API's range)"),
            (self.api_key is None or self.api_key.strip() == self.api_key != "",
             "--api-key must be non-empty without surrounding spaces"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
