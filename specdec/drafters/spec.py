"""One typed description of "how to draft", parsed once, shared by every front end.

Contract: a ``DraftSpec`` that exists is valid (``ValueError`` naming the flag); the CLI,
the server, the bench and the library all build one. ``DraftResources`` holds what drafters
need but a spec only names (loaded by ``specdec.resources``); ``build_drafter`` returns a
fresh drafter per request (its cost gate or adaptive k is a decode policy: ``policy.drafting``);
``parse_tree_budget`` is the one reader of a tree budget.
Tests: tests/drafters/test_spec.py. Details: docs/drafters.md#specs-and-resources.

    >>> DraftSpec("ngram, suffix", num_draft_tokens=8).draft_types
    ('ngram', 'suffix')"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Mapping

from .base import Drafter, NoDrafter
from .chain import ChainDrafter
from .grammar import GrammarDrafter
from .ngram import NgramDrafter
from .ngram_mod import NgramModDrafter, NgramModTable, tokenizer_fingerprint
from .suffix import SuffixDrafter, SuffixHistory

DRAFT_TYPES = ("none", "ngram", "ngram-mod", "suffix", "model", "grammar", "wedlm", "eagle", "mtp")
DEFAULT_SUFFIX_HISTORY = 32768


def parse_draft_types(text: str) -> tuple[str, ...]:
    """``"ngram, suffix"`` -> ``("ngram", "suffix")``; raises on unknown or misplaced names."""
    names = tuple(n.strip() for n in str(text).split(","))
    if not all(names) or any(n not in DRAFT_TYPES for n in names):
        raise ValueError(f"draft type {text!r}: use one of {', '.join(DRAFT_TYPES)} or a "
                         "comma chain of them (e.g. ngram,suffix)")
    if len(names) > 1 and "none" in names:
        raise ValueError(f"draft type {text!r}: 'none' cannot be part of a chain")
    if len(set(names)) != len(names):
        raise ValueError(f"draft type {text!r}: a chain names each drafter once")
    return names


def parse_tree_budget(value: int | str, *, text: bool = True) -> int | str:
    """A draft tree budget: an integer >= 0 (max token-tree nodes per step; 0 = linear
    drafts) or ``"auto"``; with ``text`` also a string of digits (``"12"`` -> 12), as a
    command line or a bench spec gives it. Raises ``ValueError`` saying what to use.

    >>> parse_tree_budget("12"), parse_tree_budget(0), parse_tree_budget("auto")
    (12, 0, 'auto')
    >>> parse_tree_budget("12", text=False)
    Traceback (most recent call last):
    ValueError: --draft-tree-budget must be an integer >= 0 or 'auto', got '12'
    """
    if value == "auto":
        return "auto"
    if text and isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"--draft-tree-budget must be an integer >= 0 or 'auto', got {value!r}")
    return value


# The draft length k a caller that names none gets: DraftSpec's, and through it the
# engine's, the decode Request's, the CLI's and the server's (one definition).
DEFAULT_NUM_DRAFT_TOKENS = 8


@dataclass(frozen=True)
class DraftSpec:
    # the defaults, chosen by measurement (docs/gate.md#measured): suffix
    # drafting up to 8 tokens, the cost gate picking each step's k
    draft_type: str = "suffix"
    num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS
    ngram_min: int = 1
    ngram_max: int = 3
    gate: bool = True  # draft only while it beats plain decoding (policy.gate.CostGate)
    adaptive_k: bool = False
    ngram_mod_file: str | None = None
    ngram_mod_size: int | None = None  # None: the table's default (2**18 slots)
    ngram_mod_n: int | None = None  # None: the table's default (4)
    suffix_history: int = DEFAULT_SUFFIX_HISTORY
    draft_model: str | None = None
    draft_tree_budget: int | str = 0  # max token-tree nodes per step; 0 = linear; "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft_type", ",".join(parse_draft_types(self.draft_type)))
        self._check_numbers()

    def _check_numbers(self) -> None:
        for name in ("num_draft_tokens", "ngram_min", "ngram_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{_flag(name)} must be an integer >= 1, got {value!r}")
        if self.ngram_max < self.ngram_min:
            raise ValueError(f"--ngram-max ({self.ngram_max}) must be >= --ngram-min ({self.ngram_min})")
        if self.suffix_history < 0:
            raise ValueError(f"--suffix-history must be >= 0, got {self.suffix_history}")
        parse_tree_budget(self.draft_tree_budget, text=False)  # a typed field: parsed already
        for name in ("ngram_mod_size", "ngram_mod_n"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{_flag(name)} must be an integer >= 1, got {value!r}")

    @property
    def draft_types(self) -> tuple[str, ...]:
        return tuple(self.draft_type.split(","))

    @property
    def speculative(self) -> bool:
        return self.draft_type != "none"

    def uses(self, name: str) -> bool:
        return name in self.draft_types

    def check_used(self) -> None:
        """Refuse options that name a drafter the spec does not use: parsed and then
        silently ignored, they would mislead (a CLI user's --draft-model with ngram)."""
        unused = [flag for flag, set_, used in (
            ("--draft-model", self.draft_model,
             self.uses("model") or self.uses("eagle") or self.uses("mtp")),
            ("--ngram-mod-file", self.ngram_mod_file, self.uses("ngram-mod")),
            ("--ngram-mod-size", self.ngram_mod_size, self.uses("ngram-mod")),
            ("--ngram-mod-n", self.ngram_mod_n, self.uses("ngram-mod")),
            ("--suffix-history", self.suffix_history != DEFAULT_SUFFIX_HISTORY, self.uses("suffix")),
        ) if set_ and not used]
        if unused:
            raise ValueError(f"{', '.join(unused)} has no effect with --draft-type {self.draft_type}: "
                             "drop it or add that drafter")
        if self.uses("model") and not self.draft_model:
            raise ValueError("--draft-type model needs --draft-model NAME_OR_PATH")
        if self.uses("eagle") and (not self.draft_model or self.uses("model")):
            raise ValueError("--draft-type eagle needs --draft-model DIR (an EAGLE-3 head), and "
                             "no draft model beside it: both would read --draft-model")
        if self.uses("mtp") and (self.uses("model") or self.uses("eagle")):
            raise ValueError("--draft-type mtp reads --draft-model as the checkpoint holding the "
                             "mtp.* weights: chain it with no model or eagle drafter")

    def with_options(self, **changes: Any) -> "DraftSpec":
        """A copy with ``changes`` applied (``None`` values keep the current field), validated."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


@dataclass
class DraftResources:
    """What drafters use but a spec only names (docs/drafters.md#specs-and-resources). Shared across requests."""

    tokenizer: Any = None
    draft: tuple[Any, Any] | None = None  # (draft model, its tokenizer)
    table: NgramModTable | None = None  # shared by ngram-mod drafters
    history: SuffixHistory | None = None  # shared by suffix drafters
    cost: Mapping[int, float] | None = None  # verify cost curve, for the gate and adaptive k
    draft_cost: Mapping[str, float] | None = None  # measure.draft_cost_for: {"fixed", "per_token"} s
    target: Any = None  # the target model: the wedlm drafter drafts with its mask predictions
    head: Any = None  # a loaded EAGLE-3 head (eagle.io.load_head): the eagle drafter's
    mtp: Any = None  # a loaded MTP block (eagle.mtp.load_mtp): the mtp drafter's (needs target)
    # policy.learnt.LearntCurves: what cost gates learnt per curve, carried across the requests of
    # its owner (a server, a bench run, a library process); None: each request's gate learns alone
    learnt: Any = None


def ngram_mod_table(spec: DraftSpec, tokenizer: Any, *, load_file: bool = True) -> NgramModTable:
    """The spec's ngram-mod table: loaded from its file when that exists (the file's size
    and n must then match any the spec sets), else empty with the spec's size and n."""
    fp = tokenizer_fingerprint(tokenizer)
    if load_file and spec.ngram_mod_file and os.path.exists(spec.ngram_mod_file):
        table = NgramModTable.load(spec.ngram_mod_file, tokenizer_fingerprint=fp)
        for name, want, have in (("size", spec.ngram_mod_size, table.size), ("n", spec.ngram_mod_n, table.n)):
            if want is not None and want != have:
                raise ValueError(f"{spec.ngram_mod_file} holds a table of {name} {have}, but "
                                 f"--ngram-mod-{name} {want} was asked: drop the flag or the file")
        return table
    kw = {k: v for k, v in (("size", spec.ngram_mod_size), ("n", spec.ngram_mod_n)) if v is not None}
    return NgramModTable(tokenizer_fingerprint=fp, **kw)


def _one(name: str, spec: DraftSpec, res: DraftResources, eos: frozenset,
         temperature: float, seed: int | None) -> Drafter:
    # the mlx drafters are imported when built: the spec is parsed by every front end, and
    # importing mlx and mlx-lm would take `specdec --help` from 0.2 s to 2.3 s
    if name == "ngram":
        return NgramDrafter(spec.ngram_min, spec.ngram_max, eos=eos)
    if name == "ngram-mod":
        table = res.table if res.table is not None else ngram_mod_table(spec, res.tokenizer)
        return NgramModDrafter(table, eos=eos)
    if name == "grammar":
        return GrammarDrafter()  # the request's grammar arrives through constrain()
    if name == "suffix":
        return SuffixDrafter(max_history_tokens=spec.suffix_history, eos=eos, history=res.history)
    if name == "wedlm":
        from ..core.wedlm import settings_of  # imports mlx: see above
        from .wedlm import WedlmDrafter  # imports mlx: see above

        if res.target is None:
            raise ValueError("draft type 'wedlm' needs the target model in the resources: build "
                             "them with specdec.prepare_resources(spec, model, tokenizer)")
        return WedlmDrafter(settings_of(res.target), eos=eos)
    if name == "eagle":
        from .eagle import EagleDrafter  # imports mlx: see above

        if res.head is None:
            raise ValueError("draft type 'eagle' needs its head loaded: build the resources with "
                             "specdec.prepare_resources(spec, model, tokenizer) (--draft-model DIR)")
        return EagleDrafter(res.head, eos=eos)
    if name == "mtp":
        from .mtp import MtpDrafter  # imports mlx: see above

        if res.mtp is None or res.target is None:
            raise ValueError("draft type 'mtp' needs its MTP block and the target loaded: build the "
                             "resources with specdec.prepare_resources(spec, model, tokenizer)")
        return MtpDrafter(res.mtp, res.target, eos=eos)
    # "model": DraftSpec admits no other name; imports mlx and mlx-lm: see above
    from .draft_model import DraftModelDrafter

    if res.draft is None:
        raise ValueError("draft type 'model' needs a loaded draft model: pass --draft-model")
    return DraftModelDrafter(res.draft[0], target_tokenizer=res.tokenizer,
                             draft_tokenizer=res.draft[1], temperature=temperature, seed=seed,
                             max_trim=spec.num_draft_tokens + 1, coupled=seed is not None)


def build_drafter(spec: DraftSpec, resources: DraftResources | None = None, *,
                  temperature: float = 0.0, seed: int | None = None) -> Drafter:
    """A fresh drafter for one request; ``temperature``/``seed`` drive a draft model's
    own sampling (its q must match the request's sampler for exact rejection sampling;
    with a seed it draws each output position with the request's key of that position,
    coupled to the target's position-keyed draw)."""
    if not spec.speculative:
        return NoDrafter()
    res = resources or DraftResources()
    tok = res.tokenizer
    eos = frozenset(getattr(tok, "eos_token_ids", None) or ())
    members = [_one(n, spec, res, eos, temperature, seed) for n in spec.draft_types]
    if len(members) == 1:
        drafter = members[0]
    else:
        drafter = ChainDrafter(members)
    drafter.draft_cost = dict(res.draft_cost) if res.draft_cost else None  # for the tree shaper
    return drafter
