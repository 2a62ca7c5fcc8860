"""The cost gate: draft only while drafting beats plain decoding, on this model and machine.

Contract of ``CostGate(inner, cost, k_max, draft_cost=None)`` (the default decode policy over
the drafter ``inner``: ``drafting.DecodePolicy``): before each proposal it prices k = 0..k_max
on the measured verify curve, the drafter's cost and observed step times; no hand-set
threshold; steps are timed on ``clock`` (wall time from one step's end to the next's, so
plain and verify steps carry the host work between them alike). A host drafter (guesses
while paused, a proposal's cost independent of its length: suffix, n-gram) is asked for its
full offer every paused token (within ``SHADOW_SHARE``), and the offer is cut to the k its
price pays for, priced on the acceptance of offers of its grade and length (``offers``; a
chain's: each proposing member its own, and its own state); the draft and the slot after it
are counted once the context shows them.
Other drafters (and trees) are priced on the acceptance by what the drafts before did and
resume on a shadow guess that came true (a drafter that cannot guess while paused, WeDLM's,
is probed instead: two verify steps). k* = 0 pauses it (plain, pipelined steps; a host
drafter's gate keeps to one-token verify steps instead where what a pipelined token saves is
less than what drafting its offers a token late loses: ``pipelines``; the saving and each
length's step shape, measured, are carried from request to request on one curve with the
acceptance of offers: ``learnt.Learnt``; the offer's price and what a late draft loses:
``offer_price``). Forced grammar tokens are always proposed. Output never changes.
Tests: tests/drafters/test_gate.py, test_gate_live.py, test_chain.py. The pricing in full:
docs/gate.md#the-cost-gate; why offers and the wall clock: lab/gate-trace."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..core.proposal import EMPTY, Proposal
from ..drafters.base import Drafter
from .adaptive import AdaptiveK, SlotCounts, best_k, draft_seconds
from .drafting import StepTime
from .learnt import Learnt, shape_at
from .offer_price import LateLoss, StepPrices
from .offers import grade

SHADOW_SHARE = 1 / 16  # at most this share of plain decoding's time goes to shadow guesses
RATIO_WEIGHT = 0.1  # EMA weight of one observed step time (observed / predicted)
REJECTED, ACCEPTED, RUN = 0, 1, 2  # what the last drafts did (``slots``)
RATIO_CLIP = (0.25, 4.0)  # one outlier step (a page fault, another process) moves it this far at most
# plain tokens after a verify step during which its scale still prices verify steps: past
# them a paused gate's plain tokens carry the machine's speed into the scale (trace: a gate
# paused from the start priced verify steps on the curve's load, plain ones on today's).
# Derived, not tuned: the scale's EMA forgets with a time constant of 1 / RATIO_WEIGHT
# steps, so that many plain tokens after a verify step it no longer knows that step.
FRESH = math.ceil(1 / RATIO_WEIGHT)


@dataclass(frozen=True)
class Guess:
    """A pending guess, counted once the context shows its fate (``CostGate._score``)."""

    start: int  # the context length it guesses from
    tokens: tuple[int, ...]
    state: int  # what the drafts before did (REJECTED, ACCEPTED, RUN) when it was made
    member: str  # the proposer that made it (``CostGate._seat``)
    offer: int | None = None  # a priced offer's length (``offers.OfferModel``); None: a shadow guess
    grade: int = 0  # a priced offer's grade (``offers.grade``)


class CostGate(AdaptiveK):
    prior = 1.0  # one pseudo-count: a few fully rejected steps are enough to pause

    def __init__(self, inner: Drafter, cost: Mapping[int, float], k_max: int,
                 draft_cost: Mapping[str, float] | None = None, decay: float = 0.95,
                 timed: bool = True, clock: Callable[[], float] = time.perf_counter,
                 memory: Learnt | None = None):
        super().__init__(inner, cost, k_max, decay, draft_cost)
        # what requests before learnt on this curve (None: this gate's alone, from nothing)
        self.memory = memory if memory is not None else Learnt()
        self.timed = timed  # learn from step_time (False: the curve alone prices steps)
        # every step is timed on one clock, from the last step's end to its own (``took``): a
        # plain token's wait alone left out the host work its pipelining overlaps (lab/gate-trace)
        self.clock, self.learnt_s = clock, 0.0
        self._last_end: float | None = None  # when the last step ended (None: none yet)
        self._ask_s = 0.0  # a paused token's ask (offer and price, or shadow guess), measured
        self._since_ask = 0  # paused tokens since the last ask
        self.name = inner.name  # the gate changes when, never what: stats keep the drafter's name
        self.scale = 1.0  # verify step: observed / predicted seconds
        # a pipelined plain token over a one-token verify step, learnt from plain tokens just
        # after verify steps (priced never above 1); later ones move ``scale`` (the load's)
        self.plain_ratio = self.memory.ratio
        self._timed: set[int] = set()  # block lengths seen once (the first is a warm-up)
        self._plain_since_verify = FRESH  # plain tokens timed since the last verify step
        self._fill: float | None = None  # a stretch's first token's ratio, priced with its landing
        self._ratio_seen = self.memory.seen  # plain tokens ``plain_ratio`` learnt from (``pipelines``)
        self._late = LateLoss(decay)  # what late drafts lose where the gate did not draft (``pipelines``)
        self._resumed = -1  # the context length at which ``watch`` last resumed
        self._hits, self._asks = 1.0, 1.0  # decayed: how often the inner drafter proposes
        # per-slot counts by what the drafts before did: REJECTED once, ACCEPTED, or a
        # RUN of rejections (a second miss in a row says more than the first: a quote ends)
        self.slots = {s: SlotCounts.zeros(k_max) for s in (REJECTED, ACCEPTED, RUN)}
        self._k = k_max
        # carried like the saving (a short answer's first offers priced on what the requests
        # before saw, not on the prior); one per proposer (``_seat``: a chain's members each)
        self._member = inner.name
        self.offers = self.memory.offers_for(inner.name, k_max, self.prior, decay)
        self._guess: Guess | None = None  # one pending at a time
        self._forced = False  # the last proposal was the grammar's forced tokens
        self.paused_tokens = 0  # plain tokens while paused (watch calls and paused steps)
        self._probe = 0  # verify steps left of a probe (a drafter that cannot guess paused)
        # a drafter whose proposal costs the same at any length and that guesses while paused
        # is asked for its full offer every step: its length and support are its confidence, so
        # drafts are priced on the acceptance of such offers (``offer_acceptance``); a chain whose
        # first member offers for free peeks too, each offer priced by its maker (``proposer_cost``)
        per_token = (inner.lead_cost or self.draft_cost or {}).get("per_token", 0.0)
        self.peeks = inner.guesses_paused and not per_token  # linear proposals (trees: by state)
        self._trees = False  # the row asks for trees: priced by state, as a costly drafter
        self._peeked = False  # the pending verify step drafts a priced offer
        self._last_offer = self._last_grade = 0  # the offer last priced: length, grade (``offers.grade``)
        self._start()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def drafts(self) -> bool:
        return not self._paused

    def plain(self, context: Sequence[int]) -> None:
        self.watch(context)

    def took(self, step: StepTime) -> None:
        """Learn a step's cost as its wall time since the last step's end (the first step
        of a request: the loop's own time), so plain tokens and verify steps carry the host
        work between steps alike, as the bench's clock does."""
        super().took(step)
        now = self.clock()
        seconds = step.seconds if self._last_end is None else now - self._last_end
        self._last_end = now
        self.learnt_s = seconds  # what the step's price learnt from (a trace's ``learnt_s``)
        self.step_time(step.block, seconds)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._start()
        self._last_end = None  # prefill is no step
        super().begin(prompt_ids)
        if self._paused and self.peeks and self._ratio_seen:  # the saving is measured (carried)
            self._priced_start(prompt_ids)

    def end(self, tokens: Sequence[int]) -> None:
        self.memory.keep()  # the pipelined saving, for the next process on this curve
        super().end(tokens)

    def _priced_start(self, prompt_ids: Sequence[int]) -> None:
        """Price the prompt's offer as ``watch`` prices a paused token's, and draft it at the first
        step where drafting it a token late would lose more than a pipelined token saves (the
        weighing ``pipelines`` makes, on this offer's own late loss: a new request has seen no
        other); nothing is in flight yet, so that draft is not late. Why: translation-181 started
        ``P P P L`` where ungated drafts at once; a paused start, where pipelining saves more, still
        sees a wrong first offer fail for free (lab/gate-start)."""
        offer = self.inner.propose(prompt_ids, self._k)
        self._seat_proposer()
        self._pend(prompt_ids, offer)
        depth = self._idle_price(offer)
        self._paused = not depth or self._late_loss(depth) <= self._prices().pipelining_saves()

    def _start(self) -> None:
        """Evidence first where it is free: a host drafter starts paused and drafts once a
        shadow guess comes true (a prompt with nothing to copy then costs nothing); a
        costly drafter's cheapest probe is a verify step, so it starts drafting."""
        self._guess, self._since_guess, self._probe, self._since_ask = None, 0, 0, 0
        self._paused = self.interval() == 1 and self.inner.guesses_paused
        self._first = REJECTED if self._paused else ACCEPTED  # a proposer's state till it drafts
        self._states: dict[str, int] = {}  # by proposer (``_seat``)
        self._seat(self.inner.name)

    def proposal_cost(self) -> Mapping[str, float] | None:
        """What the last proposal cost to make: its proposer's (``Drafter.proposer_cost``: a chain's
        member that made it), else ``draft_cost``. Why: suffix's offers priced with a head's cost
        beside it were cut (issue #47: 1.36 tokens per forward, suffix alone 1.53; test_chain.py)."""
        return self.inner.proposer_cost or self.draft_cost

    @property
    def _state(self) -> int:
        """What the drafts before did (REJECTED, ACCEPTED, RUN), of the proposer seated now."""
        return self._states[self._member]

    @_state.setter
    def _state(self, state: int) -> None:
        self._states[self._member] = state

    def _seat(self, name: str) -> None:
        """Price and count what follows as the drafter ``name``'s: each member of a chain offers
        on its own offer model (``offers``) and state, a single drafter on its own. Why: in
        ``suffix,eagle`` the head's one-token misses kept the chain's one state in a run of
        misses and priced suffix's offers low (issue #47: 1.17 tokens per forward against
        suffix alone's 1.36). Tests: tests/drafters/test_chain.py."""
        self._states.setdefault(name, self._first)
        if name != self._member:
            self._member = name
            self.offers = self.memory.offers_for(name, self.k_max, self.prior, self.decay)

    def _seat_proposer(self) -> None:
        """Seat the drafter whose offer was just asked for (none made: the one seated stays)."""
        proposer = self.inner.proposer
        if proposer is not None:
            self._seat(proposer.name)

    def offer_acceptance(self, n: int, grade: int = 0) -> list[float]:
        """Per-slot acceptance of offers of ``n`` tokens of ``grade`` in the current state
        (``offers.OfferModel``: by the offer's grade and length, averaged with its refinement by
        what the drafts before did as well as each has predicted)."""
        return self.offers.estimate(n, self._state, grade)

    def _prices(self) -> StepPrices:
        """What steps cost now, as an offer is priced (``offer_price``)."""
        return StepPrices(self.priced(), self.scale, self.plain_seconds(), self.proposal_cost())

    def priced(self) -> dict[int, float]:
        """The verify curve as steps are priced now, before the scale (``Learnt.priced``)."""
        return self.memory.priced(self.cost)

    def price_offer(self, n: int, grade: int = 0) -> int:
        """The draft length (0..n) that maximises expected tokens per second for an offer of
        ``n`` tokens of ``grade`` (0: plain; ``StepPrices.best``)."""
        self._last_offer, self._last_grade = min(n, self.k_max), grade
        if n <= 0:
            return 0
        return self._prices().best(self.offer_acceptance(n, grade), min(n, self.k_max))

    def _record_offer(self, made: tuple[int, int], proposed: int, accepted: int, grade: int) -> None:
        """Count a draft of an offer ``made`` = (state, length) of ``grade``, then move the state on."""
        self.offers.record(made, proposed, accepted, grade)
        state = made[0]
        self._state = ACCEPTED if accepted else (REJECTED if state == ACCEPTED else RUN)

    def acceptance(self) -> list[float]:
        if self._state != RUN:
            return self.slots[self._state].estimates(self.prior)
        # a run leans on what followed single misses until runs have shown their own
        return self.slots[RUN].lean(self.slots[REJECTED].estimates(self.prior), self.prior)

    def _record(self, proposed: int, accepted: int, state: int | None = None) -> None:
        """Count a draft in the state it was made in (``state``: a shadow guess's; None:
        now), then move on: ACCEPTED, or REJECTED for a first miss and RUN after that."""
        made = self._state if state is None else state
        self.slots[made].record(proposed, accepted, self.decay)
        self._state = ACCEPTED if accepted else (REJECTED if made == ACCEPTED else RUN)

    @property
    def hit(self) -> float:
        return self._hits / self._asks

    def best(self, k: int) -> int:
        """The draft length that maximises expected tokens per second now (0: plain)."""
        return best_k(self.acceptance(), self.priced(), min(k, self.k_max), self.draft_cost,
                      scale=self.scale, plain=self.plain_seconds(), hit=self.hit)

    def describe(self) -> dict:
        """What the gate knows now, for a trace (``decode.trace``: ``Gated``'s fields)."""
        # a host drafter's drafts are priced on its last offer (``offer`` tokens; it exists)
        peek = self.peeks and not self._trees
        accept = self.offer_acceptance(self._last_offer, self._last_grade) if peek else self.acceptance()
        return {"paused": self._paused, "state": self._state, "probe": self._probe,
                "offer": self._last_offer if peek else 0, "accept": [round(a, 3) for a in accept],
                "hit": 1.0 if peek else round(self.hit, 3),
                "scale": round(self.scale, 3), "plain_s": self.plain_seconds(),
                "shape": {L: round(r, 3) for L, r in self.memory.shape.items()},
                "guess": len(self._guess.tokens) if self._guess is not None else 0}

    def plain_seconds(self) -> float:
        """A pipelined plain token now: never above a one-token verify step (the ratio is learnt
        unclipped, so that noisy samples do not read it low)."""
        return self.cost[1] * self.scale * min(self.plain_ratio, 1.0)

    def _choose(self, k: int) -> int:
        self._k = k
        depth = min(k, self.best(k))
        self.chosen.append(depth)
        self._paused = depth == 0
        return depth

    def _asked(self, proposal: Proposal) -> None:
        self._hits = self.decay * self._hits + float(bool(proposal))
        self._asks = self.decay * self._asks + 1.0

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        return self._gated(context, k, None)

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        return self._gated(context, k, budget)

    def _gated(self, context: Sequence[int], k: int, budget: int | None) -> Proposal:
        self._score(context)
        forced = self.inner.forced(context, k)
        self._forced = bool(forced)
        if forced:  # all but certain: worth a verify step on any curve, paused or not
            return forced
        if self._probe:  # a probe drafts k whatever the price: its first step's tail, then its drafts
            self._probe -= 1
            self._paused = False
            proposal = self.inner.propose(context, k) if budget is None else \
                self.inner.propose_tree(context, k, budget)
            self._proposed = proposal.depth
            return proposal
        self._trees = budget is not None
        if self.peeks and not self._trees:
            return self._priced_offer(context, k)
        self._seat(self.inner.name)  # priced by state: the drafter's whole (a chain's, not a member's)
        if self._paused and self._state != ACCEPTED:  # resume on evidence only (``watch``)
            self._k = k
            self._shadow(context)
            return EMPTY
        self._score(context, final=True)  # drafting now: verification takes over the guess
        depth = self._choose(k)
        if not depth:
            self._shadow(context)
            return EMPTY
        if budget is None:
            proposal = self.inner.propose(context, depth)
        else:
            proposal = self.inner.propose_tree(context, depth, budget)
        self._asked(proposal)
        self._proposed = proposal.depth  # = len for a linear proposal
        return proposal

    def _priced_offer(self, context: Sequence[int], k: int) -> Proposal:
        """The drafter's full offer, cut to the length its price pays for (empty: a plain
        step, and pause: the next steps are pipelined until ``watch`` sees an offer pay)."""
        self._k = k
        self._score(context, final=True)  # verification takes over the pending guess
        offer = self.inner.propose(context, k)
        self._seat_proposer()
        self._asked(offer)
        depth = self._idle_price(offer)
        self.chosen.append(depth)
        self._paused = depth == 0 and self.pipelines()
        if not depth:
            self._pend(context, offer)
            return EMPTY
        # the draft and the slot after it are counted once the context shows their fate
        # (``_score``): the verify step's bonus token tests slot depth + 1 for free, so a
        # cut offer's next slot learns whether the copy goes on (traced: counted only as
        # drafted, a few misses cut eight-token offers of a copy to 3-5 tokens for good)
        self._guess = Guess(len(context), offer.tokens[:depth + 1], self._state, self._member, len(offer),
                            grade(offer.support))
        self._proposed, self._peeked = depth, True
        if depth == len(offer):
            return offer
        return Proposal(offer.tokens[:depth], None if offer.q is None else offer.q[:depth])

    def _idle_price(self, offer: Proposal) -> int:
        """``price_offer``, counting what a late draft of it would lose where the last did not pay."""
        depth = self.price_offer(len(offer), grade(offer.support))
        self._late.priced(depth, self._late_loss)
        return depth

    def _late_loss(self, k: int) -> float:
        """Seconds a k-token draft of the offer just priced loses drafted a token late."""
        return self._prices().late_loss(self.offer_acceptance(self._last_offer, self._last_grade), k)

    def pipelines(self) -> bool:
        """Whether a host drafter's gate, drafting nothing now, pauses into pipelined plain decoding
        (True) or keeps to one-token verify steps (``LateLoss.pipelines``; the saving measured once
        ``plain_ratio`` is, carried: ``learnt.Learnt``; never measured, batched or untimed: True)."""
        return self._late.pipelines(self._prices().pipelining_saves(), bool(self._ratio_seen))

    def _pend(self, context: Sequence[int], offer: Proposal) -> None:
        """Keep an offer not drafted as the shadow guess (one pending at a time)."""
        if self._guess is None and offer:
            self._guess = Guess(len(context), offer.tokens, self._state, self._member, len(offer),
                                grade(offer.support))

    def observe(self, num_accepted: int) -> None:
        if self._peeked and not self._forced:
            self.inner.observe(num_accepted)  # counted by ``_score`` (the pending guess)
            self._proposed, self._peeked = 0, False
            return  # the next offer, not this one, says whether the next step drafts
        if self._forced:  # forced tokens say nothing of the drafter's guesses: not counted
            self._forced = False
            self.inner.observe(num_accepted)
            return
        super().observe(num_accepted)
        self._paused = self.best(self._k) == 0  # so a single stream pauses at once

    def watch(self, context: Sequence[int]) -> None:
        if self.peeks and not self._trees:  # resume as soon as the drafter's offer pays
            self._score(context)
            self.paused_tokens += 1
            self._since_ask += 1
            if self._since_ask < self.interval():  # asking and pricing within the budget
                return
            # the token that was in flight when an offer resumed it (``pipelines``)
            late = not self._paused and self._resumed == len(context) - 1
            self._since_ask, t0 = 0, self.clock()
            offer = self.inner.propose(context, self._k)
            self._seat_proposer()
            self._pend(context, offer)
            # after a late resume a verify step, until a pipelined token's saving is measured
            # (its plain tokens are timed against the verify steps just before them)
            self._paused = self._idle_price(offer) == 0 and self.pipelines() and \
                not (late and not self._ratio_seen)
            self._resumed = -1 if self._paused or late else len(context)
            self._asking(self.clock() - t0)
            return
        self._score(context)
        self._seat(self.inner.name)
        self._shadow(context)
        # resume on evidence: after a shadow guess that plain decoding bore out, and only
        # if drafting then pays (a drift of the step-time estimates alone never flips it)
        self._paused = (self._state != ACCEPTED or self.best(self._k) == 0) and not self._probe

    def interval(self) -> int:
        """Paused tokens between asks (a shadow guess; a host drafter's offer and its
        price): an ask costs at most ``SHADOW_SHARE`` of the plain decoding it watches, at
        the drafter's stated cost or the ask's measured time, whichever is more."""
        # a chain's ask costs its first member's offer (suffix's: microseconds), or the next
        # member's proposal when that one has none: measured (``_ask_s``), not its summed cost
        lead = self.inner.lead_cost or self.draft_cost
        guess = max(draft_seconds(lead, self._k), self._ask_s)
        return max(1, math.ceil(guess / (SHADOW_SHARE * self.plain_seconds())))

    def _asking(self, seconds: float) -> None:
        """A paused token's ask took ``seconds`` (a running average: one slow ask, a page
        fault, spaces the next few only)."""
        self._ask_s += RATIO_WEIGHT * (seconds - self._ask_s)

    def _shadow(self, context: Sequence[int]) -> None:
        self.paused_tokens += 1
        self._since_guess += 1
        if self._guess is not None or self._since_guess < self.interval():
            return
        self._since_guess = 0
        if not self.inner.guesses_paused:  # its guesses come from verify steps: probe with two
            self._probe = 2
            return
        t0 = self.clock()
        proposal = self.inner.propose(context, self._k)
        self._asking(self.clock() - t0)
        self._asked(proposal)
        if proposal.tokens:
            self._guess = Guess(len(context), proposal.tokens, self._state, self._member)

    def _score(self, context: Sequence[int], final: bool = False) -> None:
        """Count the pending shadow guess once the context shows its fate: the tokens
        plain decoding emitted agree with a prefix of it, as verification would accept.
        While every token so far agrees, the state is already 'accepted' (the evidence a
        paused gate resumes on); ``final`` counts what has been seen of it and drops it."""
        guess = self._guess
        if guess is None:
            return
        seen = list(context[guess.start:guess.start + len(guess.tokens)])
        agreed = next((i for i, (a, b) in enumerate(zip(seen, guess.tokens)) if a != b), len(seen))
        if agreed == len(seen) < len(guess.tokens) and not final:
            if agreed:
                self._states[guess.member] = ACCEPTED
            return  # every token so far agrees: wait for the rest
        self._guess = None
        self._seat(guess.member)  # counted as its proposer's
        proposed = len(guess.tokens) if agreed < len(seen) else len(seen)  # final: what was seen
        if proposed and guess.offer is not None:
            self._record_offer((guess.state, guess.offer), proposed, agreed, guess.grade)
        elif proposed:
            self._record(proposed, agreed, guess.state)

    def step_time(self, block: int, seconds: float) -> None:
        if not self.timed or (block not in self.cost and block != 0):
            return  # a tree longer than the curve: not priced here
        if block not in self._timed:
            self._timed.add(block)  # a shape's first run compiles and warms up
            return
        lo, hi = RATIO_CLIP
        ratio = seconds / (self.cost[1] * self.scale)  # unclipped at 1 (``plain_seconds`` is cut)
        # a stretch's first token also waits for the next where the queue runs at once (this CPU),
        # its landing (resumed) for none: a pair (the first alone read a pipelined token ~10 % dear)
        if block == 0 and not self._paused:
            if self._fill is not None:
                self._plain_sample(min(max((self._fill + ratio) / 2, lo), hi), 2)
            self._fill = None
            return
        if block == 0 and self._plain_since_verify < FRESH:
            # the scale was just seen: what a plain token saves beside it is pipelining
            self._plain_since_verify += 1
            if self._plain_since_verify == 1:
                self._fill = ratio
            else:
                self._plain_sample(min(max(ratio, lo), hi), 1)
            return
        if block == 0:  # a stale scale: the machine's speed moved verify and plain alike
            predicted = self.cost[1] * self.plain_ratio
        else:
            self._plain_since_verify = 0
            drafting = draft_seconds(self.proposal_cost(), block - 1)
            predicted = self.cost[block] * shape_at(self.memory.shape, block) + drafting
            if block > 1:  # against the scale the other steps set (two time scales: ``learnt``)
                shaped = (seconds - drafting) / (self.cost[block] * self.scale)
                self.memory.learn_shape(block, min(max(shaped, lo), hi))
        seen = min(max(seconds / predicted, lo), hi)
        self.scale += RATIO_WEIGHT * (seen - self.scale)

    def _plain_sample(self, ratio: float, tokens: int) -> None:
        """``tokens`` pipelined tokens took ``ratio`` of a verify step each (the prior is no sample)."""
        for _ in range(tokens):
            self._ratio_seen += 1
            self.plain_ratio += max(1 / self._ratio_seen, RATIO_WEIGHT) * (ratio - self.plain_ratio)
        self.memory.ratio, self.memory.seen = self.plain_ratio, self._ratio_seen
