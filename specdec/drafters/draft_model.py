"""A small draft model as drafter (classic two-model speculative decoding).

Contract of ``DraftModelDrafter`` (``name = "model"``): refuses a draft whose token -> id
mapping differs from the target's; owns a rollback-capable cache and ``cached_tokens``, kept
equal to what it holds (``context + draft[:-1]`` after a proposal); ``propose`` builds the
k-step chain on the device with one host sync; ``propose_tree`` (greedy) adds the draft's
top alternatives at its first depths as leaves, best first; sampling draws with
per-position keys (``coupled``) and returns ``q``.
Tests: tests/drafters/test_draft_model.py, tests/drafters/test_draft_model_tree.py. Details: docs/drafters.md#draft-model."""

from __future__ import annotations

import os
from typing import Any, Sequence, cast

import mlx.core as mx

from ..cache.marks import StepMarks
from ..cache.prompt_cache import common_prefix
from ..cache.recurrent import RecurrentCache
from ..cache.rollback import RollbackError, WindowKVCache, make_cache, prefill, trim
from ..core.arrays import ints
from ..core.model import Model
from ..core.sampling import PositionKeys, Rng
from ..core.vocab import vocab_size
from .base import EMPTY, Drafter, Proposal

_BLOCK = 16  # missing context up to this long is fed with the first draft step


def _id_to_token(vocab: dict[str, int]) -> dict[int, str]:
    return {i: t for t, i in vocab.items()}


def check_tokenizers_match(target_tokenizer: Any, draft_tokenizer: Any) -> None:
    """Raise ValueError unless both tokenizers map every token to the same id.

    The message names the first id at which the two differ (and the sizes when they
    differ), so a user can tell a wrong model pair from, say, extra special tokens.
    """
    tv, dv = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if tv == dv:
        return
    t_by_id, d_by_id = _id_to_token(tv), _id_to_token(dv)
    size = (
        f"vocabulary sizes differ (target {len(tv)}, draft {len(dv)}); "
        if len(tv) != len(dv)
        else ""
    )
    # Ids may have gaps, so walk the union in order; the first disagreement is reported.
    for i in sorted(t_by_id.keys() | d_by_id.keys()):
        t, d = t_by_id.get(i), d_by_id.get(i)
        if t != d:
            raise ValueError(
                "draft model tokenizer does not match the target's: "
                f"{size}first difference at id {i}: target {t!r}, draft {d!r}. "
                "Speculative decoding needs identical vocabularies (same model family)."
            )
    raise ValueError(f"draft model tokenizer does not match the target's: {size.rstrip('; ')}")


def _model_rows(model: Model) -> int | None:
    """The ids the model scores (``core.vocab``, never its tokenizer's size); None when
    they cannot be read, and the rows check is skipped."""
    try:
        return vocab_size(model)
    except ValueError:
        return None


def branch_tree(chain: Sequence[int], chain_lp: Sequence[float],
                top: Sequence[Sequence[tuple[int, float]]], width: int, budget: int) -> Proposal:
    """The best-first tree of a greedy ``chain`` (``chain_lp[i]``: the draft's log-probability
    of ``chain[i]``) with, at each depth d + 1 that ``top[d]`` covers, the best ``width - 1``
    other tokens of its (token, log-prob) pairs as leaves below chain node d - 1. Ordered by
    path log-probability, a chain node before an alternative on ties; ``budget`` nodes.

    >>> import math; lp = math.log
    >>> t = branch_tree([5, 6, 7], [lp(.9), lp(.5), lp(.8)], [[(5, lp(.9)), (3, lp(.05))]], 2, 9)
    >>> t.tokens, t.parents          # scores .9, .45, .36 for the chain, .05 for 3
    ((5, 6, 7, 3), (-1, 0, 1, -1))
    """
    path = [0.0]
    for lp in chain_lp:  # a log-softmax value; min() guards against float rounding above 0
        path.append(path[-1] + min(lp, 0.0))
    # (score, is alternative, depth index, token, parent as a chain index)
    nodes = [(path[i + 1], 0, i, t, i - 1) for i, t in enumerate(chain)]
    for d, pairs in enumerate(top[: len(chain)]):
        alts = sorted(((min(lp, 0.0), t) for t, lp in pairs if t != chain[d]),
                      key=lambda a: (-a[0], a[1]))[: width - 1]
        nodes += [(path[d] + lp, 1, d, t, d - 1) for lp, t in alts]
    # a child never scores above its parent, and ties put the chain first: topological
    nodes.sort(key=lambda n: (-n[0], n[1], n[2]))
    where: dict[int, int] = {-1: -1}
    tokens: list[int] = []
    parents: list[int] = []
    for _, alt, d, t, parent in nodes[:budget]:
        parents.append(where[parent])
        if not alt:
            where[d] = len(tokens)
        tokens.append(t)
    linear = all(p == i - 1 for i, p in enumerate(parents))
    return Proposal(tokens, None, parents=None if linear else parents)


class DraftModelDrafter(Drafter):
    """Drafts with a small model that shares the target's tokenizer (docs/drafters.md#draft-model)."""

    name = "model"
    branches = True  # greedy: the draft's top-k alternatives at the first depths

    def __init__(
        self,
        draft_model: Model,
        *,
        target_tokenizer: Any = None,
        draft_tokenizer: Any = None,
        temperature: float = 0.0,
        seed: int | None = None,
        max_trim: int = 16,
        prefill_step_size: int = 512,
        branch_width: int = 3,
        branch_depths: int = 2,
        coupled: bool = False,
    ):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if branch_width < 1 or branch_depths < 0:
            raise ValueError(f"need branch_width >= 1 and branch_depths >= 0, got "
                             f"{branch_width}, {branch_depths}")
        if max_trim < 1 or prefill_step_size < 1:
            raise ValueError(
                f"need max_trim >= 1 and prefill_step_size >= 1, got {max_trim}, {prefill_step_size}"
            )
        if target_tokenizer is not None and draft_tokenizer is not None:
            check_tokenizers_match(target_tokenizer, draft_tokenizer)
            rows = _model_rows(draft_model)
            top_id = max(draft_tokenizer.get_vocab().values())
            if rows is not None and rows <= top_id:  # more rows (padding) is fine, fewer is not
                raise ValueError(
                    f"draft model has {rows} vocabulary rows but the tokenizer has ids up to "
                    f"{top_id}: it cannot score every token"
                )
        # Fail now, not at the first propose, if the draft's cache cannot roll back (attention
        # sinks): UnsupportedCacheError names the layer. Recurrent layers roll back by marks.
        make_cache(draft_model, max_trim=max_trim, recurrent=True)
        self.model = draft_model
        self.temperature = float(temperature)
        self.max_trim = max_trim
        self.prefill_step_size = prefill_step_size
        self.branch_width, self.branch_depths = branch_width, branch_depths
        # trees are exact only under greedy drafting; without alternatives they are chains
        self.branches = self.temperature == 0 and branch_depths > 0 and branch_width >= 2
        # Randomness is explicit: a key we own and split, never MLX's global state.
        if coupled and seed is None:
            raise ValueError("a coupled draft model draws with a seeded request's keys: give the seed")
        # coupled (a seeded request): the draft at output position t draws with the key the
        # target draws position t with, so the two draws agree whenever the draft's
        # distribution is close to the target's (Gumbel-max coupling)
        self._coupled = seed if coupled and self.temperature > 0 else None
        self._positions: PositionKeys | None = None
        self._prompt_len = 0
        seed = int.from_bytes(os.urandom(4), "little") if seed is None else seed
        self._key = mx.random.key(seed)
        self._cache: list | None = None
        self._marks: StepMarks | None = None  # a recurrent cache's rollback points
        self._slack = 0  # the rollback slack the current cache was built with
        self._tokens: list[int] = []
        self._last_len = 0
        self._known = 0  # context[:_known] is known to equal _tokens[:_known]
        self.stats = {"proposals": 0, "drafted": 0, "accepted": 0, "rebuilds": 0, "fed": 0}

    # ---- state ---------------------------------------------------------------------------
    @property
    def cache(self) -> list | None:
        """The draft model's per-layer cache (None before ``begin``): read it, do not change it."""
        return self._cache

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose keys/values the draft cache holds, in order (a copy)."""
        return list(self._tokens)

    def _built(self) -> list:
        """The cache ``sync`` has just built or rolled back (never None after it)."""
        if self._cache is None:
            raise RuntimeError("the draft cache is built by sync(); call it first")
        return self._cache

    def reset(self) -> None:
        """Drop the draft cache; the next propose rebuilds it."""
        self._cache, self._marks, self._tokens, self._known = None, None, [], 0

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """Prefill the draft cache with the prompt (all but its last token). The engine
        calls this inside its prefill phase, so the draft's prompt pass counts as prefill,
        not decode; ``propose`` then only feeds what is new."""
        self._known = 0  # a new prompt: compare from its start
        self._prompt_len = len(prompt_ids)
        if self._coupled is not None:  # a new request: its output positions start at 0
            self._positions = PositionKeys(Rng(self._coupled))
        keep = self.sync(prompt_ids, self.max_trim)
        missing = list(prompt_ids[keep:-1])
        prefill(self.model, self._built(), missing, self.prefill_step_size)
        self._tokens += missing
        self.stats["fed"] += len(missing)
        self._known = len(self._tokens)  # == prompt_ids[:-1]
        if self._marks is not None:  # a next turn that repeats this prompt comes back here
            self._marks.mark(self._known, anchor=True)

    def _rebuild(self, slack: int) -> None:
        self._cache = make_cache(self.model, max_trim=slack, recurrent=True)
        self._marks = StepMarks(self._cache) if isinstance(self._cache, RecurrentCache) else None
        self._slack, self._tokens = slack, []
        self.stats["rebuilds"] += 1

    def sync(self, context: Sequence[int], k: int) -> int:
        """Roll the cache back to the longest usable shared prefix of ``context`` (what each
        proposal starts with; blocks of up to ``k``); returns its length."""
        # context[-1] must be fed; context[:_known] is already known to match
        keep = common_prefix(self._tokens, context, self._known, len(context) - 1)
        # Window caches can roll back at most their slack; each step trims up to k - 1.
        windowed = any(isinstance(c, WindowKVCache) for c in self._cache or ())
        if self._cache is None or keep == 0 or (windowed and k > self._slack):
            self._rebuild(max(self.max_trim, k))
            return 0
        try:
            if self._marks is not None:
                # A recurrent state cannot be trimmed: back to the latest marked position at
                # or before keep (the rest is fed again). Within a request that is keep
                # itself (a mark per drafted token); a new prompt diverging before the last
                # prompt's end has none, and the cache is rebuilt and prefilled (exact).
                keep = self._marks.back_to(keep, len(self._tokens))
            else:
                trim(self._cache, len(self._tokens) - keep)
        except RollbackError:
            # Window caches refuse (they dropped what lies before their window), and
            # recurrent ones without a mark that far back: the shared prefix cannot be
            # reused, so this is effectively a new request.
            self._rebuild(max(self.max_trim, k))
            return 0
        del self._tokens[keep:]
        return keep

    # ---- drafting ------------------------------------------------------------------------
    def _pick(self, logits: mx.array, key: mx.array | None) -> tuple[mx.array, mx.array | None]:
        """Next draft token from last-position logits (shape (1, V)), and its distribution."""
        if key is None:
            return mx.argmax(logits, axis=-1), None
        scaled = logits.astype(mx.float32) / self.temperature
        # drawn on the row (V,), as the target draws: mlx's noise for a (1, V) draw differs
        tok = mx.random.categorical(scaled[0], key=key)[None]
        return tok, mx.softmax(scaled, axis=-1)

    def _scores(self, logits: mx.array, tok: mx.array, top: bool) -> list[mx.array]:
        """The draft's log-probability of the chain token ``tok`` and, with ``top``, its
        ``branch_width`` most likely tokens (unordered) with their log-probabilities."""
        lp = logits[0].astype(mx.float32)
        lp = lp - mx.logsumexp(lp)
        if not top:
            return [lp[tok]]
        b = min(self.branch_width, lp.shape[-1])
        idx = mx.argpartition(-lp, kth=b - 1)[:b]
        return [lp[tok], idx, lp[idx]]

    def _keys(self, k: int, position: int) -> list[mx.array | None] | mx.array | None:
        """Keys of the k draws (after a placeholder): the positions' keys when coupled,
        else k fresh splits of the drafter's own key; None when greedy."""
        if self._positions is not None:
            self._positions.release(position)  # positions before the context are final
            return [None] + [self._positions.at(position + i) for i in range(k)]
        if self.temperature == 0:
            return None
        keys = mx.random.split(self._key, k + 1)
        self._key = keys[0]
        return keys

    def _chain(self, block: Sequence[int], k: int, branch: int = 0, position: int = 0,
               fed: int = 0) -> tuple[mx.array, mx.array | None, list[mx.array]]:
        """Feed ``block`` then draft ``k`` tokens, all lazily: no host sync in the loop.
        With ``branch`` > 0 (greedy) the third value holds, lazily, the chain tokens'
        log-probabilities (k,), and the top tokens and their log-probabilities at the
        first ``branch`` depths (``_scores``), for ``propose_tree``; else it is empty.
        ``position``: the output position of the first draft token (coupled keys);
        ``fed``: the tokens the cache holds before ``block`` (a recurrent cache's marks)."""
        keys = self._keys(k, position)
        y = mx.array(list(block))[None]
        toks: list[mx.array] = []
        qs: list[mx.array] = []
        scores: list[list[mx.array]] = []
        for i in range(k):
            logits = self.model(y, cache=self._cache)[:, -1, :]
            if self._marks is not None:  # the state after this token: a rollback point
                self._marks.mark(fed + len(block) + i)
            tok, q = self._pick(logits, None if keys is None else keys[i + 1])
            toks.append(tok)
            if q is not None:  # sampled (keys is not None): every draw has one
                qs.append(q)
            if branch:
                scores.append(self._scores(logits, tok, i < branch))
            if i + 1 < k:  # the last token is not fed (docs/drafters.md#draft-model)
                y = tok[None]
                # Start computing this step while Python builds the next one.
                mx.async_eval(y)
        q = mx.concatenate(qs, axis=0) if keys is not None else None
        extra: list[mx.array] = []
        if branch:
            tops = [s for s in scores if len(s) == 3]
            extra = [mx.concatenate([s[0] for s in scores]),
                     mx.stack([s[1] for s in tops]), mx.stack([s[2] for s in tops])]
        return mx.concatenate(toks, axis=0), q, extra

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self._last_len = 0
        if k <= 0 or not context:
            return EMPTY
        draft, q, _ = self._draft(list(context), k)
        return Proposal(draft, q)

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """The greedy chain with the draft's top-``branch_width`` alternatives at its first
        ``branch_depths`` depths, best first (docs/drafters.md#draft-model); linear when sampling."""
        k = min(k, budget)
        if not self.branches:
            return self.propose(context, k)
        self._last_len = 0
        if k <= 0 or not context:
            return EMPTY
        chain, _, (chain_lp, top_tok, top_lp) = self._draft(list(context), k, self.branch_depths)
        top = [list(zip(t, lp)) for t, lp in zip(top_tok, top_lp)]
        return branch_tree(chain, chain_lp, top, self.branch_width, budget)

    def _draft(self, context: list[int], k: int,
               branch: int = 0) -> tuple[list[int], mx.array | None, list[list]]:
        """``propose``'s body: roll back, feed what is missing, run the chain, one host
        sync, bookkeeping. Returns (chain tokens, q, the chain's scores as lists)."""
        try:
            keep = self.sync(context, k)
            missing = context[keep:]
            # The chain's first input must end with context[-1]. A few missing tokens (the
            # usual decode step: the unfed last draft + the target's token) go in as one
            # block; a long stretch (a new prompt) is prefilled without computing logits
            # (only the cache is evaluated), since the block's logits would be computed
            # for every position and all but the last thrown away.
            head = len(missing) - 1 if len(missing) > _BLOCK else 0
            prefill(self.model, self._built(), missing[:head], self.prefill_step_size)
            toks, q, extra = self._chain(missing[head:], k, branch, len(context) - self._prompt_len,
                                         keep + head)
            mx.eval(toks, *([q] if q is not None else []), *extra)  # the one host sync
            draft = ints(toks)
            # already on the host: no further sync; 1-D (the chain's) and 2-D (the tops)
            scores = [cast("list[Any]", a.tolist()) for a in extra]
        except BaseException:
            self.reset()  # the cache's contents are unknown now: never trust them again
            raise
        self._tokens = context + draft[:-1]
        self._known = len(context)
        self._last_len = len(draft)
        self.stats["proposals"] += 1
        self.stats["drafted"] += len(draft)
        self.stats["fed"] += len(missing) + len(draft) - 1
        return draft, q, scores

    def observe(self, num_accepted: int) -> None:
        if not 0 <= num_accepted <= self._last_len:
            raise ValueError(f"accepted {num_accepted} of a {self._last_len}-token proposal")
        self.stats["accepted"] += num_accepted

    @property
    def acceptance_rate(self) -> float:
        return self.stats["accepted"] / self.stats["drafted"] if self.stats["drafted"] else 0.0
