"""What a batch's verify block costs, learnt online: the price ``decode.loop`` asks before
it chooses a block length.

Invariant: with no curve (``curve`` None) or a lone row, nothing is priced and a row drafts
as it would alone; otherwise a block is chosen only where ``choose_block`` predicts fewer
seconds per emitted token than plain batching. Tests: tests/policy/test_pricing.py,
tests/decode/test_batch.py (pricing),
tests/test_measure.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .block import choose_block

# lengths of the verify cost curve past 16 that price a batch's block (B rows x L)
BATCH_COST_LENGTHS = (24, 32, 48, 64, 96, 128)
# an exponential moving average's weight on the newest observation, for every running
# estimate of the batch (cost ratios, each row's acceptance)
EMA_WEIGHT = 0.2


def ema(old: float | None, new: float, weight: float = EMA_WEIGHT) -> float:
    """The running average after observing ``new`` (``new`` itself when nothing came before).

    >>> ema(None, 2.0), ema(1.0, 6.0)
    (2.0, 2.0)
    """
    return new if old is None else (1 - weight) * old + weight * new


def size_class(rows: int) -> int:
    """Batch sizes priced alike: 1, 2, 3-4, 5-8, ... (a ratio learnt on few rows says
    little about many)."""
    return rows.bit_length()


@dataclass
class BlockPrice:
    """The seconds of a B x L verify block: ``curve(n)`` (the verify cost curve of one
    sequence, n tokens) times the ratio of observed to predicted step time learnt per
    (size class, L) — a batch's rows attend over longer, padded contexts than the
    curve's, which makes long blocks dearer than it says."""

    curve: Callable[[int], float] | None = None
    learn: bool = True
    ratio: dict[tuple[int, int], float] = field(default_factory=dict)
    # ``hopeless`` answers by (rows, k, curve) since the last ``observe`` / ``reprice``: a
    # pipelined batch asks it every step and learns nothing between (ratios change only there)
    _hopeless: dict[tuple[int, int, object], bool] = field(default_factory=dict, repr=False,
                                                           compare=False)

    def reprice(self, curve: Callable[[int], float]) -> None:
        """A new curve: ratios learnt against the old one mean nothing against it."""
        self.curve, self.ratio = curve, {}
        self._hopeless.clear()

    def cost(self, rows: int) -> Callable[[int], float]:
        """The cost of a ``rows`` x L block (n = rows * L tokens), at the ratio observed
        at the nearest L not longer than it (1.0 until one is)."""
        size, curve = size_class(rows), self.curve
        if curve is None:
            raise ValueError("no verify cost curve to price a block with: reprice() first")

        def cost(n: int) -> float:
            L = n // rows
            seen = [b for s, b in self.ratio if s == size and b <= L]
            return curve(n) * (self.ratio[(size, max(seen))] if seen else 1.0)

        return cost

    def block(self, drafts: Sequence[int], alphas: Sequence[float]) -> int:
        """The block length L (1 + drafted tokens per row) for these rows' drafts."""
        if len(drafts) < 2 or self.curve is None:
            return 1 + max(drafts, default=0)
        return choose_block(drafts, alphas, self.cost(len(drafts)))

    def hopeless(self, rows: int, k: int) -> bool:
        """Whether no block could pay at this batch size even if every draft of depth ``k``
        were accepted: then a plain step asks no drafter (proposals cost host time every
        step for an estimate no step can use)."""
        if rows < 2 or self.curve is None:
            return False
        key = (rows, k, self.curve)
        if key not in self._hopeless:
            self._hopeless[key] = k == 0 or choose_block([k] * rows, [1.0] * rows, self.cost(rows)) == 1
        return self._hopeless[key]

    def priced_out(self, depths: Sequence[int], alphas: Sequence[float]) -> bool:
        """Whether the price rules out every block for these rows even at their full draft
        depths (``depths``: 0 for a row not drafting) at their learnt acceptance: some row
        drafts, yet L = 1 (a pipelined batch then asks one row's drafter a step, in turn:
        ``decode.pipeline.land``). False for a lone row or no curve (a row drafts as alone)."""
        if len(depths) < 2 or self.curve is None or max(depths, default=0) < 1:
            return False
        return self.block(depths, alphas) == 1

    def observe(self, rows: int, L: int, seconds: float) -> None:
        """A B x L step took ``seconds``: update the ratio for its size class and L."""
        if not self.learn or self.curve is None or rows < 2:
            return
        key = (size_class(rows), L)
        self.ratio[key] = ema(self.ratio.get(key), seconds / self.curve(rows * L))
        self._hopeless.clear()
