"""Drafter configurations the benchmark sweeps, written as short specs.

Contract: ``parse_config("ngram:k=4:n=2")`` → ``BenchConfig``. A spec is a draft type (or
a comma chain such as ``ngram,suffix``) followed by ``:``-separated options: ``k=K``
(draft length, default 4), ``n=N`` (n-gram minimum for ``ngram``), ``adaptive`` (choose k
per step, K is the maximum), ``gate`` (skip drafting on non-repetitive prompts) and
``warm`` (ngram-mod starts from a table built earlier, e.g. by another model).
``none`` is plain decoding, the baseline. ``sweep(types, ks, ns, ...)`` is the cartesian
product. ``BenchConfig.drafter(...)`` builds a fresh drafter for one run, so no state
(an n-gram index, an ngram-mod table, a suffix history) leaks from one measured run into
the next: each run measures the same cold start.

    >>> parse_config("ngram:k=8:n=2:adaptive").label
    'ngram k=8 n=2 adaptive'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..drafters import DRAFT_TYPES, make_drafter


@dataclass(frozen=True)
class BenchConfig:
    draft_type: str = "none"
    k: int = 4
    n_min: int = 1
    adaptive: bool = False
    gate: bool = False
    warm: bool = False  # ngram-mod starts from the plan's warm table instead of an empty one

    @property
    def baseline(self) -> bool:
        return self.draft_type == "none"

    @property
    def label(self) -> str:
        if self.baseline:
            return "plain"
        parts = [self.draft_type, f"k={self.k}"]
        parts += [f"n={self.n_min}"] if self.n_min != 1 else []
        parts += ["adaptive"] * self.adaptive + ["gate"] * self.gate + ["warm"] * self.warm
        return " ".join(parts)

    @property
    def spec(self) -> str:
        if self.baseline:
            return "none"
        opts = [f"k={self.k}"] + ([f"n={self.n_min}"] if self.n_min != 1 else [])
        opts += ["adaptive"] * self.adaptive + ["gate"] * self.gate + ["warm"] * self.warm
        return ":".join([self.draft_type, *opts])

    def drafter(self, tokenizer: Any, *, cost: Mapping[int, float] | None = None,
                draft: tuple[Any, Any] | None = None, table: Any = None) -> Any:
        """A fresh drafter for one run (``None`` for the baseline).

        ``cost``: the verify cost curve (needed by ``adaptive``); ``draft``: (model,
        tokenizer) for the ``model`` type; ``table``: the file of a saved ngram-mod table, loaded
        afresh for every run of a ``warm`` config (the cross-model warm-start experiment)."""
        if self.baseline:
            return None
        names = self.draft_type.split(",")
        opts: dict[str, Any] = dict(ngram_min=self.n_min, ngram_max=max(3, self.n_min),
                                    tokenizer=tokenizer)
        if "ngram-mod" in names:
            from ..drafters.ngram_mod import NgramModTable, tokenizer_fingerprint

            if self.warm and table is None:
                raise ValueError(f"config {self.spec} needs a warm ngram-mod table")
            fp = tokenizer_fingerprint(tokenizer)
            opts["table"] = (NgramModTable.load(table, tokenizer_fingerprint=fp) if self.warm
                             else NgramModTable(tokenizer_fingerprint=fp))
        if "model" in names:
            if draft is None:
                raise ValueError(f"config {self.spec} needs a draft model: pass --draft-model")
            opts["draft_model"], opts["draft_tokenizer"] = draft
        if self.adaptive and cost is None:
            raise ValueError(f"config {self.spec} needs the verify cost curve")
        return make_drafter(self.draft_type, eos=tokenizer.eos_token_ids, gate=self.gate,
                            adaptive_k=cost if self.adaptive else None,
                            num_draft_tokens=self.k, **opts)


def parse_config(spec: str) -> BenchConfig:
    head, *opts = [p.strip() for p in spec.strip().split(":")]
    names = [n.strip() for n in head.split(",")]
    if not head or any(n not in DRAFT_TYPES for n in names) or (len(names) > 1 and "none" in names):
        raise ValueError(f"config {spec!r}: the draft type must be one of "
                         f"{', '.join(DRAFT_TYPES)} or a comma chain of them")
    kw: dict[str, Any] = {"draft_type": ",".join(names)}
    for opt in opts:
        key, _, value = opt.partition("=")
        if key in ("adaptive", "gate", "warm") and not value:
            kw[key] = True
        elif key in ("k", "n") and value.isdigit() and int(value) >= 1:
            kw["k" if key == "k" else "n_min"] = int(value)
        else:
            raise ValueError(f"config {spec!r}: bad option {opt!r} "
                             "(use k=K, n=N, adaptive, gate, warm)")
    if head == "none" and len(kw) > 1:
        raise ValueError(f"config {spec!r}: plain decoding takes no options")
    if kw.get("warm") and "ngram-mod" not in names:
        raise ValueError(f"config {spec!r}: 'warm' applies to ngram-mod only")
    return BenchConfig(**kw)


def sweep(types: Iterable[str], ks: Iterable[int], ns: Iterable[int] = (1,), *,
          adaptive: bool = False, gate: bool = False) -> list[BenchConfig]:
    """Every draft type × k × n (n only varies ``ngram``), plus adaptive/gate variants."""
    out: list[BenchConfig] = []
    for t in types:
        for k in ks:
            for n in (ns if t == "ngram" else (1,)):
                out.append(parse_config(f"{t}:k={k}:n={n}"))
        if adaptive:
            out.append(parse_config(f"{t}:k={max(ks)}:adaptive"))
        if gate:
            out.append(parse_config(f"{t}:k={min(ks)}:gate"))
    return list(dict.fromkeys(out))
