"""One dataclass carries a run's configuration from argparse to the engine.

Contract: ``add_draft_flags(parser)`` adds the drafter flags (``specdec generate``,
``parity`` and ``serve`` share them); ``RunConfig.from_args(namespace)`` validates at the
boundary (raising
``ValueError`` with what to change). The drafter flags become one ``DraftSpec``
(``draft_spec_from_args``, shared with ``specdec serve``); ``generation()`` is the run as
one ``Generation`` value; ``build_drafter`` loads what the spec needs and returns a fresh
drafter (``resources.drafter_for``); ``engine_kwargs()`` gives the keyword arguments of
``specdec.generate`` / ``stream_generate`` other than the drafter.
Tests: tests/test_config.py, tests/test_cli.py, tests/drafters/test_spec.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.model import Model
from .cache.errors import refuse_quantized_speculation
from .drafters.spec import DEFAULT_SUFFIX_HISTORY, DRAFT_TYPES, DraftSpec, parse_tree_budget
from .loader.api import DTYPES  # one list of dtype names
from .policy.drafting import DecodePolicy
from .prompts import demo_prompt

if TYPE_CHECKING:  # drafters are imported when built (``drafter_for``): the CLI starts in 0.2 s
    from .drafters.ngram_mod import NgramModTable

DRAFT_FIELDS = tuple(f.name for f in fields(DraftSpec))
KV_BITS = (2, 3, 4, 6, 8)
DECODERS = ("speculative", "wedlm")


def add_decoder_flags(p: argparse.ArgumentParser) -> None:
    """``--decoder`` and WeDLM's flags (``specdec generate`` and ``specdec serve``)."""
    p.add_argument("--decoder", choices=DECODERS, default="speculative",
                   help="speculative (default; lossless) or wedlm: WeDLM's parallel mask-window "
                        "decoder for WeDLM checkpoints. NOT lossless: its output may differ from "
                        "plain decoding (--draft-type wedlm is the lossless mode)")
    p.add_argument("--wedlm-window", type=int, default=16,
                   help="--decoder wedlm: mask slots after the committed prefix (paper: 16)")
    p.add_argument("--entropy-threshold", type=float, default=0.3,
                   help="WeDLM (--decoder wedlm, --draft-type wedlm): fill / draft a slot when "
                        "entropy + penalty is below this (0.3)")
    p.add_argument("--position-penalty", type=float, default=0.01,
                   help="WeDLM (--decoder wedlm, --draft-type wedlm): entropy penalty per slot "
                        "past the first mask (0.01)")


def add_draft_flags(p: argparse.ArgumentParser, *, draft_type: str = DraftSpec.draft_type) -> None:
    """The drafter flags (one per ``DraftSpec`` field), shared with ``specdec serve``. Their
    argparse defaults are None, so a flag given can be told from one left out (``--decoder
    wedlm`` refuses any given); ``draft_spec_from_args`` fills in the spec's defaults."""
    p.add_argument("--draft-type",
                   help=f"one of {', '.join(DRAFT_TYPES)}, or a chain like ngram,suffix,model "
                        f"(default: {draft_type})")
    p.add_argument("--draft-model", help="draft model for --draft-type model (same tokenizer)")
    p.add_argument("--num-draft-tokens", type=int,
                   help=f"draft length k (the most; the cost gate picks each step's; default: "
                        f"{DraftSpec.num_draft_tokens})")
    p.add_argument("--ngram-min", type=int, help=f"default: {DraftSpec.ngram_min}")
    p.add_argument("--ngram-max", type=int, help=f"default: {DraftSpec.ngram_max}")
    p.add_argument("--ngram-mod-file", help="load the ngram-mod table from / save it to this file")
    p.add_argument("--ngram-mod-size", type=int, help="ngram-mod table slots (default 2**18)")
    p.add_argument("--ngram-mod-n", type=int, help="ngram-mod hashed n-gram length (default 4)")
    p.add_argument("--suffix-history", type=int,
                   help=f"suffix history tokens (default: {DEFAULT_SUFFIX_HISTORY})")
    p.add_argument("--gate", action=argparse.BooleanOptionalAction, default=None,
                   help="the cost gate (default on): draft only while drafting beats plain decoding "
                        "on the measured verify cost, picking each step's k; --no-gate drafts k always")
    p.add_argument("--adaptive-k", action="store_true", default=None,
                   help="choose k per step from acceptance and the measured verify cost")
    p.add_argument("--draft-tree-budget", type=tree_budget_arg,
                   help="max token-tree nodes verified per step (0 = linear drafts, the default; "
                        "'auto' = from the measured verify cost); --num-draft-tokens stays the max depth")


def tree_budget_arg(text: str) -> int | str:
    """``--draft-tree-budget``: ``parse_tree_budget`` with argparse's error type."""
    try:
        return parse_tree_budget(text)
    except ValueError as e:  # argparse names the flag itself
        raise argparse.ArgumentTypeError(str(e).removeprefix("--draft-tree-budget ")) from None


def add_distributed_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--distributed", action="store_true",
                   help="shard the model over the mlx.distributed group (start with mlx.launch); "
                        "rank 0 drafts, decides and prints, the other ranks follow")
    p.add_argument("--distributed-timeout", type=float, default=120.0,
                   help="seconds without a forward, inside a request, after which rank 0 "
                        "declares the group hung and stops")


def draft_spec_from_args(ns: argparse.Namespace, draft_type: str = DraftSpec.draft_type) -> DraftSpec:
    """The ``DraftSpec`` of the drafter flags in an argparse namespace (flags left out
    take the spec's defaults; ``--draft-type`` left out is ``draft_type``)."""
    return DraftSpec(**{"draft_type": draft_type, **{f: getattr(ns, f) for f in DRAFT_FIELDS
                                                     if getattr(ns, f, None) is not None}})


def draft_flags_given(ns: argparse.Namespace) -> tuple[str, ...]:
    """The drafter flags given on the command line (their argparse defaults are None)."""
    return tuple(f"--{f.replace('_', '-')}" for f in DRAFT_FIELDS if getattr(ns, f, None) is not None)


KV_BITS_FIX = "add --draft-type none to decode plainly with --kv-bits, or drop --kv-bits"


def check_kv_bits(kv_bits: int | None) -> None:
    if kv_bits is not None and kv_bits not in KV_BITS:
        raise ValueError(f"--kv-bits must be one of {', '.join(map(str, KV_BITS))}")


@dataclass
class RunConfig:
    model: str = "smollm2-135m"
    prompt: str | None = None
    prompt_file: str | None = None
    system: str | None = None
    raw: bool = False
    max_tokens: int = 256
    spec: DraftSpec = field(default_factory=DraftSpec)
    stop: list[str] | None = None
    temp: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    repetition_context_size: int = 20
    dtype: str = "auto"
    kv_bits: int | None = None
    prefill_step_size: int = 512
    prompt_cache_file: str | None = None
    json_schema: str | None = None  # a JSON schema file the output must follow
    # --decoder wedlm: WeDLM's lossy parallel decoder (decode.wedlm), its defaults the paper's
    decoder: str = "speculative"
    wedlm_window: int = 16
    entropy_threshold: float = 0.3
    position_penalty: float = 0.01
    draft_flags: tuple[str, ...] = ()  # the drafter flags given (``--decoder wedlm`` refuses them)
    table: NgramModTable | None = field(default=None, init=False, repr=False)  # in use

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "RunConfig":
        names = {f.name for f in fields(cls) if f.init} - {"spec", "draft_flags"}
        cfg = cls(**{k: v for k, v in vars(ns).items() if k in names}, spec=draft_spec_from_args(ns),
                  draft_flags=draft_flags_given(ns))
        cfg.validate()
        return cfg

    def validate(self) -> None:
        self._check_decoder()  # first: with --decoder wedlm no drafter flag applies at all
        self.spec.check_used()
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}")
        for name in ("max_tokens", "prefill_step_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("give either --prompt or --prompt-file, not both")
        self.sampling().validate()
        check_kv_bits(self.kv_bits)
        refuse_quantized_speculation(self.kv_bits, self.spec.speculative, KV_BITS_FIX)  # wedlm's: above

    def _check_decoder(self) -> None:
        if self.decoder not in DECODERS:
            raise ValueError(f"--decoder must be one of {', '.join(DECODERS)}, got {self.decoder!r}")
        if self.decoder != "wedlm":
            return
        self.wedlm_settings(0)  # validates the window, threshold and penalty
        unsupported = [flag for flag, set_ in (
            ("--top-p", self.top_p < 1), ("--top-k", self.top_k > 0), ("--min-p", self.min_p > 0),
            ("--repetition-penalty", self.repetition_penalty != 1),
            ("--json-schema", self.json_schema),
            ("--prompt-cache-file", self.prompt_cache_file), ("--kv-bits", self.kv_bits)) if set_]
        drafter = self.draft_flags or (("--draft-type",) if self.spec != DraftSpec() else ())
        if drafter:
            raise ValueError(f"{', '.join(drafter)} not supported with --decoder wedlm: the wedlm "
                             "decoder drafts itself (its mask window), so drafter flags do not "
                             "apply: drop them, or use --draft-type wedlm without --decoder wedlm "
                             "for the lossless mode")
        if unsupported:
            raise ValueError(f"{', '.join(unsupported)} not supported with --decoder wedlm (window "
                             "decoding: greedy or --temp only): drop it, or use --draft-type "
                             "wedlm (lossless)")

    def wedlm_settings(self, mask_token_id: int) -> Any:
        """The ``decode.wedlm.WedlmSettings`` of the --wedlm-* flags for this mask token."""
        from .core.wedlm import WedlmSettings  # imports mlx: `specdec --help` starts without it

        return WedlmSettings(mask_token_id, self.wedlm_window, self.entropy_threshold,
                             self.position_penalty)

    def sampling(self) -> Any:
        from .core.sampling import SamplingParams  # imports mlx: `specdec --help` starts without it

        return SamplingParams(self.temp, self.top_p, self.top_k, self.min_p, self.seed,
                              self.repetition_penalty, self.repetition_context_size)

    def response_format(self) -> dict | None:
        """``--json-schema FILE`` as an OpenAI ``response_format`` (None without it)."""
        if self.json_schema is None:
            return None
        path = Path(self.json_schema)
        try:
            schema = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"--json-schema {path}: not a readable JSON file ({e})") from None
        return {"type": "json_schema", "json_schema": {"name": path.stem, "schema": schema}}

    def read_prompt(self) -> str:
        if self.prompt_file is not None:
            path = Path(self.prompt_file)
            if not path.is_file():
                raise ValueError(f"--prompt-file {path} does not exist")
            return path.read_text()
        if self.prompt == "-":
            return sys.stdin.read()
        if self.prompt is None:
            return demo_prompt()
        return self.prompt

    def generation(self) -> Any:
        """The run as one ``decode.generation.Generation`` (``--num-draft-tokens`` and the
        other drafter flags in its ``draft``: the spec), passed unchanged to the row."""
        from .decode.generation import Generation  # imports mlx: `specdec --help` starts without it

        return Generation(max_tokens=self.max_tokens, draft=self.spec, sampling=self.sampling(),
                          stop=tuple(self.stop or ()), prefill_step_size=self.prefill_step_size,
                          kv_bits=self.kv_bits, response_format=self.response_format())

    def build_drafter(self, model: Model, tokenizer: Any) -> DecodePolicy:
        """The drafter for one request, under the spec's decode policy (``drafter_for``, the
        one assembly): loads the draft model / ngram-mod file as asked, keeping the table
        (``--ngram-mod-file`` saves it after the run)."""
        from .resources import drafter_for, resources_for  # imports mlx: `--help` without it

        if self.spec.uses("wedlm"):  # the --wedlm-* flags shape its drafts too
            from .core.wedlm import attach_settings, settings_of  # imports mlx: `--help` without it

            attach_settings(model, self.wedlm_settings(settings_of(model).mask_token_id))
        res = resources_for(self.spec, model, tokenizer, dtype=self.dtype)
        self.table = res.table
        return drafter_for(self.spec, model, tokenizer, res, sampling=self.sampling())

    def engine_kwargs(self) -> dict[str, Any]:
        """``generate``'s keyword arguments: the ``generation`` and how the prompt is
        encoded; the drafter is ``build_drafter``'s."""
        return dict(generation=self.generation(), system=self.system,
                    chat=False if self.raw else None)
