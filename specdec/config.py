"""One dataclass carries a run's configuration from argparse to the engine.

Contract: ``RunConfig.from_args(namespace)`` validates at the boundary (raising
``ValueError`` with what to change); ``engine_kwargs()`` is exactly the keyword arguments
``specdec.generate`` / ``stream_generate`` take.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .drafters import DRAFT_TYPES

from .loader.api import DTYPES  # noqa: E402  (one list of dtype names)


@dataclass
class RunConfig:
    model: str = "smollm2-135m"
    prompt: str | None = None
    prompt_file: str | None = None
    system: str | None = None
    raw: bool = False
    max_tokens: int = 256
    draft_type: str = "ngram"
    num_draft_tokens: int = 4
    ngram_min: int = 1
    ngram_max: int = 3
    stop: list[str] | None = None
    temp: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    repetition_context_size: int = 20
    draft_model: str | None = None
    ngram_mod_file: str | None = None
    suffix_history: int = 32768
    gate: bool = False
    gate_threshold: float = 0.02
    adaptive_k: bool = False
    dtype: str = "auto"
    kv_bits: int | None = None
    prefill_step_size: int = 512
    table: Any = field(default=None, init=False, repr=False)  # the ngram-mod table in use

    @classmethod
    def from_args(cls, ns: Any) -> "RunConfig":
        names = {f.name for f in fields(cls) if f.init}
        cfg = cls(**{k: v for k, v in vars(ns).items() if k in names})
        cfg.validate()
        return cfg

    def validate(self) -> None:
        names = [n.strip() for n in self.draft_type.split(",")]
        if any(n not in DRAFT_TYPES for n in names) or (len(names) > 1 and "none" in names):
            raise ValueError(
                f"--draft-type must be one of {', '.join(DRAFT_TYPES)} or a comma chain of them"
            )
        if "model" in names and not self.draft_model:
            raise ValueError("--draft-type model needs --draft-model NAME_OR_PATH")
        # a flag for a drafter that is not in use would be parsed and silently ignored
        unused = [flag for flag, used in (
            ("--draft-model", not self.draft_model or "model" in names),
            ("--ngram-mod-file", not self.ngram_mod_file or "ngram-mod" in names),
            ("--suffix-history", self.suffix_history == 32768 or "suffix" in names),
            ("--gate-threshold", self.gate_threshold == 0.02 or self.gate),
        ) if not used]
        if unused:
            raise ValueError(f"{', '.join(unused)} has no effect with --draft-type {self.draft_type}"
                             f"{'' if self.gate else ' and without --gate'}: drop it or add that drafter")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}")
        for name in ("max_tokens", "num_draft_tokens", "ngram_min", "prefill_step_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.ngram_max < self.ngram_min:
            raise ValueError("--ngram-max must be >= --ngram-min")
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("give either --prompt or --prompt-file, not both")
        from .sampling import SamplingParams

        SamplingParams(self.temp, self.top_p, self.top_k, self.min_p, self.seed,
                       self.repetition_penalty, self.repetition_context_size).validate()
        if self.kv_bits is not None and self.kv_bits not in (2, 3, 4, 6, 8):
            raise ValueError("--kv-bits must be one of 2, 3, 4, 6, 8")

    def read_prompt(self) -> str:
        if self.prompt_file is not None:
            path = Path(self.prompt_file)
            if not path.is_file():
                raise ValueError(f"--prompt-file {path} does not exist")
            return path.read_text()
        if self.prompt == "-":
            return sys.stdin.read()
        if self.prompt is None:
            from .prompts import demo_prompt

            return demo_prompt()
        return self.prompt

    def build_drafter(self, model: Any, tokenizer: Any) -> Any:
        """The drafter for one request: loads the draft model / ngram-mod file as asked."""
        from .drafters import make_drafter, shared_ngram_mod_table

        opts: dict[str, Any] = dict(ngram_min=self.ngram_min, ngram_max=self.ngram_max,
                                    suffix_history=self.suffix_history, temperature=self.temp,
                                    seed=self.seed)
        if self.draft_model:
            from .loader import load

            opts["draft_model"], opts["draft_tokenizer"] = load(self.draft_model, dtype=self.dtype)
        if "ngram-mod" in (n.strip() for n in self.draft_type.split(",")):
            opts["table"] = self.table = self._ngram_mod_table(tokenizer, shared_ngram_mod_table)
        cost = None
        if self.adaptive_k:
            from .drafters.adaptive import cost_curve_for

            cost = cost_curve_for(model, self.num_draft_tokens + 1)
        return make_drafter(self.draft_type, eos=tokenizer.eos_token_ids, tokenizer=tokenizer,
                            gate=self.gate, gate_threshold=self.gate_threshold,
                            adaptive_k=cost, num_draft_tokens=self.num_draft_tokens, **opts)

    def _ngram_mod_table(self, tokenizer: Any, shared: Any) -> Any:
        from .drafters.ngram_mod import NgramModTable, tokenizer_fingerprint

        if self.ngram_mod_file and Path(self.ngram_mod_file).exists():
            return NgramModTable.load(self.ngram_mod_file, tokenizer_fingerprint=tokenizer_fingerprint(tokenizer))
        return shared(tokenizer)

    def engine_kwargs(self) -> dict[str, Any]:
        return dict(
            drafter=self.draft_type,
            max_tokens=self.max_tokens,
            num_draft_tokens=self.num_draft_tokens,
            ngram_min=self.ngram_min,
            ngram_max=self.ngram_max,
            stop=self.stop,
            temperature=self.temp,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            seed=self.seed,
            repetition_penalty=self.repetition_penalty,
            repetition_context_size=self.repetition_context_size,
            system=self.system,
            chat=False if self.raw else None,
            prefill_step_size=self.prefill_step_size,
            kv_bits=self.kv_bits,
        )
