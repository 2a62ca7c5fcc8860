"""Drafter configurations the benchmark sweeps, written as short specs.

Contract: ``parse_config(text)`` -> ``BenchConfig`` (a ``DraftSpec`` plus the bench-only
``warm``); options ``k=``, ``n=``, ``adaptive``, ``nogate``, ``mod-size=``, ``mod-n=``,
``tree=N|auto``, ``warm``; ``none`` is plain decoding. ``BenchConfig.drafter()`` builds a
fresh drafter per run, so no state leaks between measured runs.
Tests: tests/bench/test_configs.py, tests/bench/test_runner.py, tests/bench/test_workloads.py.
Options in full: docs/bench.md#configs.

    >>> parse_config("ngram:k=8:n=2:adaptive:nogate").label
    'ngram k=8 n=2 adaptive nogate'"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..drafters.spec import DraftResources, DraftSpec, ngram_mod_table, parse_tree_budget
from ..policy.drafting import DecodePolicy

_FLAGS = ("adaptive", "nogate", "warm")
_NUMBERS = {"k": "num_draft_tokens", "n": "ngram_min", "mod-size": "ngram_mod_size",
            "mod-n": "ngram_mod_n"}


@dataclass(frozen=True)
class BenchConfig:
    spec: DraftSpec = field(default_factory=lambda: DraftSpec("none"))
    warm: bool = False  # ngram-mod starts from the plan's warm table instead of an empty one

    @property
    def baseline(self) -> bool:
        return not self.spec.speculative

    @property
    def k(self) -> int:
        return self.spec.num_draft_tokens

    @property
    def tree_budget(self) -> int | str:
        """``draft_tree_budget`` for ``generate`` (0 = linear drafts)."""
        return self.spec.draft_tree_budget

    @property
    def draft_type(self) -> str:
        return self.spec.draft_type

    def _options(self) -> list[tuple[str, str]]:
        """(option, value) pairs that differ from the defaults, in spec order."""
        s = self.spec
        out = [("k", str(s.num_draft_tokens))]
        out += [("n", str(s.ngram_min))] if s.ngram_min != 1 else []
        out += [("mod-size", str(s.ngram_mod_size))] if s.ngram_mod_size else []
        out += [("mod-n", str(s.ngram_mod_n))] if s.ngram_mod_n else []
        out += [("tree", str(s.draft_tree_budget))] if s.draft_tree_budget else []
        flags = (("adaptive", s.adaptive_k), ("nogate", not s.gate), ("warm", self.warm))
        return out + [(name, "") for name, on in flags if on]

    @property
    def label(self) -> str:
        if self.baseline:
            return "plain"
        return " ".join([self.draft_type] + [f"{o}={v}" if v else o for o, v in self._options()])

    @property
    def text(self) -> str:
        """The spec string that parses back to this config."""
        if self.baseline:
            return "none"
        return ":".join([self.draft_type] + [f"{o}={v}" if v else o for o, v in self._options()])

    def drafter(self, tokenizer: Any, *, cost: Mapping[int, float] | None = None,
                draft: tuple[Any, Any] | None = None, table: str | None = None,
                draft_cost: Mapping[str, float] | None = None,
                heads: DraftResources | None = None, learnt: Any = None) -> DecodePolicy | None:
        """A fresh drafter for one run (``None`` for the baseline).

        ``cost``: the verify cost curve (needed by the gate and ``adaptive``); ``draft``: (model,
        tokenizer) for the ``model`` type; ``draft_cost``: the drafter's measured cost per
        proposal (``measure.draft_cost_for``; adaptive k and ``tree=auto`` count it); ``table``: the file of a saved ngram-mod table, loaded
        afresh for every run of a ``warm`` config (the cross-model warm-start experiment);
        ``heads``: the plan's loaded EAGLE-3 head / MTP block and target (eagle and mtp configs);
        ``learnt``: the run's ``policy.learnt.LearntCurves`` (what its cost gates carry; None: none)."""
        from ..resources import drafter_for  # loads models: the bench's parser starts without it

        if self.baseline:
            return None
        res = DraftResources(tokenizer=tokenizer, draft=draft, cost=cost, draft_cost=draft_cost,
                             head=heads.head if heads else None, mtp=heads.mtp if heads else None,
                             target=heads.target if heads else None, learnt=learnt)
        if self.spec.uses("ngram-mod"):
            if self.warm and table is None:
                raise ValueError(f"config {self.text} needs a warm ngram-mod table")
            spec = self.spec.with_options(ngram_mod_file=table if self.warm else None)
            res.table = ngram_mod_table(spec, tokenizer, load_file=self.warm)
        if self.spec.uses("model") and draft is None:
            raise ValueError(f"config {self.text} needs a draft model: pass --draft-model")
        if (self.spec.adaptive_k or self.spec.gate) and cost is None:
            raise ValueError(f"config {self.text} needs the verify cost curve")
        return drafter_for(self.spec, None, tokenizer, res)  # the one assembly


def parse_config(text: str) -> BenchConfig:
    head, *opts = [p.strip() for p in text.strip().split(":")]
    try:
        kw: dict[str, Any] = {"draft_type": head}
        warm = False
        for opt in opts:
            key, _, value = opt.partition("=")
            if key in _FLAGS and not value:
                warm |= key == "warm"
                if key == "nogate":
                    kw["gate"] = False
                else:
                    kw[{"adaptive": "adaptive_k"}.get(key, key)] = True
            elif key in _NUMBERS and value.isascii() and value.isdigit():
                kw[_NUMBERS[key]] = int(value)  # DraftSpec checks the bounds
            elif key == "tree" and (budget := _tree_budget(value)) is not None:
                kw["draft_tree_budget"] = budget
            else:
                raise ValueError(f"bad option {opt!r} (use k=K, n=N, mod-size=S, mod-n=N, "
                                 "tree=N|auto, adaptive, nogate, warm)")
        kw.pop("warm", None)
        if "ngram_min" in kw:
            kw["ngram_max"] = max(3, kw["ngram_min"])
        spec = DraftSpec(**kw)
    except ValueError as e:
        raise ValueError(f"config {text!r}: {e}") from None
    if not spec.speculative and opts:
        raise ValueError(f"config {text!r}: plain decoding takes no options")
    if warm and not spec.uses("ngram-mod"):
        raise ValueError(f"config {text!r}: 'warm' applies to ngram-mod only")
    return BenchConfig(spec, warm)


def _tree_budget(value: str) -> int | str | None:
    """``tree=``'s value through the one parser (None: not a budget)."""
    try:
        return parse_tree_budget(value)
    except ValueError:
        return None


def sweep(types: Iterable[str], ks: Iterable[int], ns: Iterable[int] = (1,), *,
          adaptive: bool = False, gate: bool = False) -> list[BenchConfig]:
    """Every draft type × k × n (n only varies ``ngram``), plus adaptive/ungated variants
    (``gate``: each type's smallest k without the gate, beside the gated default)."""
    out: list[BenchConfig] = []
    ks = list(ks)
    for t in types:
        for k in ks:
            for n in (ns if t == "ngram" else (1,)):
                out.append(parse_config(f"{t}:k={k}:n={n}"))
        if adaptive:
            out.append(parse_config(f"{t}:k={max(ks)}:adaptive"))
        if gate:
            out.append(parse_config(f"{t}:k={min(ks)}:nogate"))
    return list(dict.fromkeys(out))
