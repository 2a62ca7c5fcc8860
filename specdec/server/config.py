"""``specdec serve`` settings: one dataclass built from argparse and validated at start.

Contract: ``ServerConfig.from_args(namespace)`` raises ``ValueError`` naming the flag to
change. The drafter flags become one ``DraftSpec`` (``speculation``: the defaults a
request's ``speculative`` field overrides, plus the server-wide draft model, suffix
history size and ngram-mod table shape); sampling and dtype flags are checked by
``RunConfig.validate`` (the same rules and messages as ``specdec generate``); the
server's own flags here. ``temp`` ... ``min_p`` are the defaults of omitted sampling
parameters; ``max_tokens`` (None: none) caps every request's completion.
Tests: tests/server/test_config.py.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
from dataclasses import dataclass, field, replace

from ..config import RunConfig, draft_flags_given, draft_spec_from_args
from ..drafters.spec import DraftSpec
from ..toolcall import PARSERS
from .http.middleware import BODY_READ_TIMEOUT_S, LOOPBACK_HOSTS
from .engine.spec.options import MAX_DRAFT_TOKENS

API_KEY_ENV = "SPECDEC_API_KEY"
SERVE_DRAFT_TYPE = "grammar,suffix"  # serve's --draft-type default


@dataclass
class ServerConfig:
    model: str = "smollm2-135m"
    served_model_name: str | None = None
    model_alias: tuple[str, ...] = ()  # more names clients may send (shell patterns)
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    more_api_keys: tuple[str, ...] = ()  # with api_key: each key a tenant (see keys())
    api_keys_file: str | None = None  # one key per line ('#' comments), more tenants
    dtype: str = "auto"
    kv_bits: int | None = None
    memory_file: str | None = None
    save_interval: float = 60.0
    drain_timeout: float = 30.0  # SIGTERM: how long in-flight requests may run on
    queue_size: int = 64
    max_batch: int | None = None  # None: 32 where the model can batch, else 1
    max_body_bytes: int = 4 << 20
    body_timeout: float = BODY_READ_TIMEOUT_S  # the longest wait for a body's next piece (then 408)
    max_tokens: int | None = None  # caps every request; None: a request without one runs to EOS
    prompt_cache_bytes: int = 1 << 30
    kv_budget: int | None = None  # bytes of batch KV cache; None: kv_budget.default_budget()
    context_length: int | None = None
    temp: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    tool_call_parser: str = "auto"  # a toolcall.PARSERS name
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides loopback's
    speculation: DraftSpec = field(default_factory=lambda: DraftSpec(SERVE_DRAFT_TYPE))
    draft_flags: tuple[str, ...] = ()  # the drafter flags given (``--decoder wedlm`` refuses them)
    # --decoder wedlm: every request decodes with WeDLM's lossy window decoder (RunConfig's
    # fields and checks, the same as specdec generate's)
    decoder: str = "speculative"
    wedlm_window: int = 16
    entropy_threshold: float = 0.3
    position_penalty: float = 0.01

    @property
    def model_id(self) -> str:
        return self.served_model_name or self.model

    def host_allowlist(self) -> tuple[str, ...] | None:
        """Host headers to answer: loopback names (and ``--allowed-hosts``) when bound to
        loopback; only ``--allowed-hosts`` when given on another address; else any."""
        if self.host in LOOPBACK_HOSTS or self.host.startswith("127."):
            return (*LOOPBACK_HOSTS, self.host, *self.allowed_hosts)
        return self.allowed_hosts or None

    def max_in_flight(self) -> int:
        """Requests inside the app at once: the queue, the batch and room for probes."""
        return self.queue_size + (self.max_batch or 32) + 64

    def keys(self) -> tuple[str, ...]:
        """Every API key (none: the API is open). With more than one, each key is a tenant:
        its own prefix-cache entries and drafting memory, nothing read across keys."""
        keys = [self.api_key] if self.api_key else []
        keys += self.more_api_keys
        if self.api_keys_file:
            with open(self.api_keys_file, encoding="utf-8") as f:
                keys += [line.strip() for line in f if line.strip() and not line.startswith("#")]
        return tuple(dict.fromkeys(keys))

    def serves(self, name: str) -> bool:
        """Whether a request naming ``name`` as its model is for the served model."""
        return name == self.model_id or any(fnmatch.fnmatchcase(name, a) for a in self.model_alias)

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> ServerConfig:
        if getattr(ns, "ngram_mod_file", None):
            raise ValueError("specdec serve keeps its ngram-mod table in --memory-file "
                             "(with the suffix history): use that instead of --ngram-mod-file")
        own = {k: getattr(ns, k) for k in cls.__dataclass_fields__
               if k not in ("speculation", "more_api_keys", "draft_flags")}
        own["model_alias"] = tuple(own["model_alias"] or ())
        own["allowed_hosts"] = tuple(own["allowed_hosts"] or ())
        given = own.pop("api_key") or []  # --api-key is repeatable
        given = [given] if isinstance(given, str) else list(given)
        own["more_api_keys"] = tuple(given[1:])
        cfg = cls(**own, api_key=given[0] if given else None,
                  speculation=draft_spec_from_args(ns, SERVE_DRAFT_TYPE),
                  draft_flags=draft_flags_given(ns))
        if cfg.api_key is None:
            cfg.api_key = os.environ.get(API_KEY_ENV) or None
        cfg.validate()
        return cfg

    def run_config(self) -> RunConfig:
        """The ``specdec generate`` settings these flags amount to: their checks (sampling,
        dtype, drafter, decoder, --kv-bits) and ``wedlm_settings`` are RunConfig's."""
        s = self.speculation
        wedlm = self.decoder == "wedlm"
        # with --decoder wedlm, serve's default drafter is unused; one given is refused
        draft_type = DraftSpec.draft_type if wedlm and s.draft_type == SERVE_DRAFT_TYPE else s.draft_type
        return RunConfig(
            model=self.model, max_tokens=self.max_tokens or 1, temp=self.temp, top_p=self.top_p,
            top_k=self.top_k, min_p=self.min_p, dtype=self.dtype,
            kv_bits=self.kv_bits, decoder=self.decoder,
            wedlm_window=self.wedlm_window, entropy_threshold=self.entropy_threshold,
            position_penalty=self.position_penalty, draft_flags=self.draft_flags,
            spec=replace(s, draft_type=draft_type,
                         draft_model=s.draft_model if s.uses("model") or s.uses("eagle") else None,
                         suffix_history=DraftSpec.suffix_history,
                         ngram_mod_size=None, ngram_mod_n=None))

    def validate(self) -> None:
        s = self.speculation
        # requests may ask for draft_type "model" later, so a loaded draft model may go
        # unused now; the suffix history and the table are the server's shared memory
        if s.uses("model") and not s.draft_model:
            raise ValueError("--draft-type model needs --draft-model NAME_OR_PATH")
        self.run_config().validate()  # with --kv-bits: its values, and never with a drafter
        if s.num_draft_tokens > MAX_DRAFT_TOKENS:
            raise ValueError(f"--num-draft-tokens must be <= {MAX_DRAFT_TOKENS}")
        if self.api_keys_file is not None and not os.path.isfile(self.api_keys_file):
            # before the checks below: building them reads the file
            raise ValueError(f"--api-keys-file {self.api_keys_file}: no such file")
        checks = [
            (1 <= self.port <= 65535, "--port must be in 1..65535"),
            (self.max_tokens is None or self.max_tokens >= 1, "--max-tokens must be >= 1"),
            (self.queue_size >= 1, "--queue-size must be >= 1"),
            (self.max_batch is None or self.max_batch >= 1, "--max-batch must be >= 1"),
            (self.max_body_bytes >= 1024, "--max-body-bytes must be >= 1024"),
            (self.prompt_cache_bytes >= 0, "--prompt-cache-bytes must be >= 0 (0 = off)"),
            (self.kv_budget is None or self.kv_budget >= 1 << 20, "--kv-budget must be >= 1 MiB (bytes)"),
            (self.save_interval >= 0, "--save-interval must be >= 0 (0 = only at shutdown)"),
            (0 <= self.drain_timeout <= 3600, "--drain-timeout must be in [0, 3600] seconds"),
            (0 < self.body_timeout <= 3600, "--body-timeout must be in (0, 3600] seconds"),
            (self.context_length is None or self.context_length >= 2, "--context-length must be >= 2"),
            (self.temp <= 2, "--temp must be <= 2 (the API's range)"),
            (self.tool_call_parser in PARSERS,
             f"--tool-call-parser must be one of {', '.join(PARSERS)}"),
            (all(k.strip() == k != "" for k in (self.api_key or "x", *self.more_api_keys)),
             "--api-key must be non-empty without surrounding spaces"),
            (not self.api_keys_file or self.api_key is not None or bool(self.keys()),
             f"--api-keys-file {self.api_keys_file} holds no key"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
