"""All-pairs (pairwise) coverage of a test table, checked by brute force.

A parametrized test over factors (prompt kind, k, n_min, ...) need not run their full cross
product to meet every interaction of two factors: a table where every pair of two factors'
values shares a row does. ``missing_pairs`` lists the pairs a table misses; the tables
that rely on it assert it is empty (tests/parity/test_pairwise.py), so a row edited away
fails there, not silently.
"""

from __future__ import annotations

from itertools import combinations, product
from typing import Any, Mapping, Sequence


def missing_pairs(rows: Sequence[Mapping[str, Any]], levels: Mapping[str, Sequence[Any]]):
    """Every ``((factor_a, value_a), (factor_b, value_b))`` of two distinct factors in
    ``levels`` that no row holds together; also every single value no row holds (as
    ``((factor, value),)``) and every row value outside its factor's levels (as
    ``(("unknown", factor), value)``): a table passes only with all of them covered."""
    out: list[tuple] = []
    for row in rows:
        out += [(("unknown", f), row[f]) for f in levels if row[f] not in levels[f]]
    out += [((f, v),) for f in levels for v in levels[f] if not any(r[f] == v for r in rows)]
    for a, b in combinations(levels, 2):
        seen = {(r[a], r[b]) for r in rows}
        out += [((a, va), (b, vb)) for va, vb in product(levels[a], levels[b])
                if (va, vb) not in seen]
    return out
