"""Suffix-automaton drafting: the longest earlier match, then its most frequent continuation.

Contract (``suffix_match.suffix_proposal`` states it purely; ``SuffixIndex`` computes it
incrementally; ``SuffixDrafter`` wraps it): match the longest suffix seen earlier, live or in
the shared ``SuffixHistory`` (documents never match across boundaries; live wins ties);
draft ``min(k, max(1, ceil(alpha * m)))`` tokens; continue with the most frequent follower
(counts capped at ``count_cap``, recency breaks ties). Appending is amortised O(1); the
history saves and loads atomically, refusing another tokenizer's file.
Tests: tests/drafters/test_suffix.py, tests/drafters/test_suffix_match.py. Why the cap, costs:
docs/drafters.md#suffix."""

from __future__ import annotations

import json
import os
from collections import deque
from typing import Iterable, Sequence

import numpy as np

from .base import Drafter, Proposal
from ..core.persist import atomic_write, read_npz
from .suffix_match import DEFAULT_ALPHA, DEFAULT_COUNT_CAP, draft_length
from .suffix_tree import index_tree

DEFAULT_MAX_HISTORY_TOKENS = 32768
LOW_WATER = 0.75  # a full history forgets down to this share of its window at once
HISTORY_FORMAT = "specdec-suffix-history"
HISTORY_VERSION = 1


class SuffixAutomaton:
    """Online suffix automaton over integer tokens (the classic construction).

    State 0 is the root (the empty string). Per state, in parallel lists: ``next`` (token ->
    state), ``link`` (suffix link), ``length`` (its longest string), ``count`` (endpos size,
    capped at ``count_cap``) and ``first`` (where its first occurrence ends). At most
    2n states for n tokens. Negative tokens are reserved for document separators.
    """

    def __init__(self, count_cap: int = DEFAULT_COUNT_CAP):
        self.count_cap = count_cap
        self.tokens: list[int] = []
        self.next: list[dict[int, int]] = [{}]
        self.link, self.length, self.count, self.first = [-1], [0], [0], [-1]
        self.last = 0  # the state of the whole text

    def extend(self, tokens: Iterable[int]) -> None:
        for t in tokens:
            self.append(t)

    def append(self, tok: int) -> None:
        nxt, link, length, count, first = self.next, self.link, self.length, self.count, self.first
        cur = len(length)
        nxt.append({})
        link.append(0)
        length.append(length[self.last] + 1)
        count.append(0)
        first.append(len(self.tokens))
        self.tokens.append(tok)
        p = self.last
        while p >= 0 and tok not in nxt[p]:
            nxt[p][tok] = cur
            p = link[p]
        if p >= 0:
            q = nxt[p][tok]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                # Split q: the clone takes its strings up to length[p] + 1, whose occurrences
                # so far are exactly q's (the new one is counted below).
                clone = len(length)
                nxt.append(dict(nxt[q]))
                link.append(link[q])
                length.append(length[p] + 1)
                count.append(count[q])
                first.append(first[q])
                while p >= 0 and nxt[p].get(tok) == q:
                    nxt[p][tok] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        self.last = cur
        # The new end position is in the endpos of cur and every suffix-link ancestor;
        # stop at the first capped one, since all above it are capped too.
        v, cap = cur, self.count_cap
        while v > 0 and count[v] < cap:
            count[v] += 1
            v = link[v]

    def longest_earlier(self) -> tuple[int, int]:
        """(state, length) of the longest suffix of the text that also ends earlier: the
        suffix link of the whole text's state, whose strings occur at least twice."""
        s = self.link[self.last]
        return (s, self.length[s]) if s > 0 else (0, 0)

    def advance(self, state: int, matched: int, tok: int) -> tuple[int, int]:
        """Matching statistics: given the state and length of the longest suffix of some
        other text that occurs here, the same after that text grows by ``tok``."""
        nxt, link = self.next, self.link
        while state and tok not in nxt[state]:
            state = link[state]
            matched = self.length[state]
        if tok in nxt[state]:
            return nxt[state][tok], matched + 1
        return 0, 0

    def with_follower(self, state: int, matched: int) -> tuple[int, int]:
        """Shorten a match until it has a real (non-separator) follower; strings that only
        occur at the end of documents have none."""
        while state and not any(t >= 0 for t in self.next[state]):
            state = self.link[state]
            matched = self.length[state]
        return (state, matched) if state else (0, 0)

    def share(self, state: int, tok: int) -> float:
        """Of the occurrences of ``state``'s strings followed by a token, the share ``tok`` followed
        (counts capped at ``count_cap``)."""
        counts = [self.count[t] for k, t in self.next[state].items() if k >= 0]
        return self.count[self.next[state][tok]] / max(sum(counts), 1)

    def continuation(self, state: int, n: int, eos: frozenset[int] | set[int]) -> list[int]:
        """Up to ``n`` tokens following the most frequent transitions from ``state``."""
        nxt, count, first = self.next, self.count, self.first
        out: list[int] = []
        while len(out) < n:
            best, best_key = -1, (-1, -1)
            for tok, t in nxt[state].items():
                # Different children end their first occurrences at different positions,
                # so the key never ties.
                if tok >= 0 and (count[t], first[t]) > best_key:
                    best, best_key = tok, (count[t], first[t])
            if best < 0:
                break
            out.append(best)
            if best in eos:
                break
            state = nxt[state][best]
        return out


class SuffixHistory:
    """A FIFO window of earlier requests (documents) and one automaton over them.

    One history may back many ``SuffixIndex``es (a server shares one across its requests);
    it must only change (``add``) while none of them is answering a lookup — the server
    changes it on its one inference thread between requests. ``version`` counts changes,
    so an index whose match state predates one re-matches its live text (a new document
    may hold a longer match; a rebuild replaces the automaton its state points into).

    ``save(path, tokenizer_fingerprint=...)`` writes the documents atomically (temp file
    in the same directory, fsync, ``os.replace``); ``load`` refuses a file written with
    another tokenizer (``ValueError``) and rebuilds the automaton, keeping the newest
    documents that fit ``max_tokens``.
    """

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_HISTORY_TOKENS,
        count_cap: int = DEFAULT_COUNT_CAP,
    ):
        if max_tokens < 0:
            raise ValueError(f"max_history_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.count_cap = count_cap
        self.docs: deque[list[int]] = deque()
        self.tokens = 0  # sum of len(docs), separators excluded
        self.automaton = SuffixAutomaton(count_cap)
        self.version = 0

    def _add_doc(self, doc: list[int]) -> None:
        self.automaton.extend(doc)
        # A separator unique in this automaton: its position, negated (tokens are >= 0).
        self.automaton.append(-1 - len(self.automaton.tokens))

    def add(self, doc: Sequence[int]) -> None:
        """Append one request's tokens (FIFO by request; a request longer than the whole
        window keeps its latest tokens). Past the window, the oldest requests go down to
        ``LOW_WATER`` of it (the newest always stays) and the automaton is rebuilt: a
        rebuild then comes once per quarter window added, not once per request, so the
        tokens ever fed to automata stay under 4x those added (``tests/drafters/test_suffix.py``)."""
        budget = self.max_tokens
        if budget <= 0 or not doc:
            return
        doc = [int(t) for t in doc[-budget:]]
        self.docs.append(doc)
        self.tokens += len(doc)
        self.version += 1
        if self.tokens <= budget:
            self._add_doc(doc)
            return
        while self.tokens > LOW_WATER * budget and len(self.docs) > 1:
            self.tokens -= len(self.docs.popleft())
        self._rebuild()

    def _rebuild(self) -> None:
        # An automaton cannot forget text: rebuild it over the window that is left.
        self.automaton = SuffixAutomaton(self.count_cap)
        for d in self.docs:
            self._add_doc(d)
        self.version += 1

    def save(self, path: str | os.PathLike, *, tokenizer_fingerprint: str) -> None:
        if not tokenizer_fingerprint:
            raise ValueError("saving a suffix history needs the tokenizer fingerprint")
        meta = {"format": HISTORY_FORMAT, "version": HISTORY_VERSION,
                "tokenizer_fingerprint": tokenizer_fingerprint}
        docs = list(self.docs)
        flat = np.fromiter((t for d in docs for t in d), dtype=np.int64, count=self.tokens)
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        atomic_write(os.fspath(path), lambda f: np.savez(
            f, meta=np.array(json.dumps(meta)), tokens=flat, lengths=lengths))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        tokenizer_fingerprint: str,
        max_tokens: int = DEFAULT_MAX_HISTORY_TOKENS,
        count_cap: int = DEFAULT_COUNT_CAP,
    ) -> SuffixHistory:
        path = os.fspath(path)
        meta, arrays = read_npz(path, "suffix history", HISTORY_FORMAT, HISTORY_VERSION,
                                ("tokens", "lengths"))
        flat, lengths = arrays["tokens"], arrays["lengths"]
        if meta.get("tokenizer_fingerprint") != tokenizer_fingerprint:
            raise ValueError(
                f"{path} was written with tokenizer {meta.get('tokenizer_fingerprint')}, not "
                f"{tokenizer_fingerprint}: its token ids mean other text. Delete it or use "
                "a history saved with this tokenizer."
            )
        if lengths.sum() != len(flat) or (len(lengths) and lengths.min() < 1) or (
            len(flat) and flat.min() < 0
        ):
            raise ValueError(f"{path}: document lengths do not match its tokens; delete it")
        history = cls(max_tokens, count_cap)
        docs = np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
        kept: list[list[int]] = []
        for d in reversed(docs):  # the newest documents that fit, in their FIFO order
            if history.tokens + len(d) > max_tokens:
                break
            kept.append(d.tolist())
            history.tokens += len(d)
        history.docs.extend(reversed(kept))
        history._rebuild()
        return history


class SuffixIndex:
    """The live automaton of the current request plus a ``SuffixHistory`` of earlier
    requests (its own, or one shared with other indexes), answering ``suffix_proposal``
    queries with ``lookup``.

    The history's documents are each followed by a separator token unique in its
    automaton, so no match can span two documents. The longest suffix of the live text
    occurring in the history is tracked as each live token arrives.
    """

    def __init__(
        self,
        max_history_tokens: int = DEFAULT_MAX_HISTORY_TOKENS,
        count_cap: int = DEFAULT_COUNT_CAP,
        history: SuffixHistory | None = None,
    ):
        self.store = history if history is not None else SuffixHistory(max_history_tokens, count_cap)
        self.max_history_tokens = self.store.max_tokens
        self.count_cap = count_cap
        self.live = SuffixAutomaton(count_cap)
        self._hist_state = self._hist_len = 0
        self._hist_version = self.store.version

    @property
    def tokens(self) -> list[int]:
        return self.live.tokens

    @property
    def docs(self) -> deque[list[int]]:
        return self.store.docs

    @property
    def history(self) -> SuffixAutomaton:
        return self.store.automaton

    @property
    def history_tokens(self) -> int:
        return self.store.tokens

    def extend(self, tokens: Iterable[int]) -> None:
        if self._hist_version != self.store.version:
            self._rematch()
        live, hist = self.live, self.store.automaton
        s, m = self._hist_state, self._hist_len
        for t in tokens:
            live.append(t)
            s, m = hist.advance(s, m, t)
        self._hist_state, self._hist_len = s, m

    def _rematch(self) -> None:
        """The shared history changed since our match state was computed: match the live
        text against it from scratch (O(live length), once per change)."""
        hist, s, m = self.store.automaton, 0, 0
        for t in self.live.tokens:
            s, m = hist.advance(s, m, t)
        self._hist_state, self._hist_len = s, m
        self._hist_version = self.store.version

    def new_request(self) -> None:
        """Move the current request's tokens into the history window (FIFO by request) and
        start an empty live text."""
        doc = self.live.tokens
        self.live = SuffixAutomaton(self.count_cap)
        self._hist_state = self._hist_len = 0
        self.store.add(doc)
        self._hist_version = self.store.version

    def match(self) -> tuple[int, SuffixAutomaton, int]:
        """(length, automaton, state) of the match a proposal follows: the longer of the live
        and the history match, the live one on ties."""
        if self._hist_version != self.store.version:
            self._rematch()
        live_state, live_len = self.live.longest_earlier()
        hist_state, hist_len = self.history.with_follower(self._hist_state, self._hist_len)
        if hist_len > live_len:
            return hist_len, self.history, hist_state
        return live_len, self.live, live_state

    def lookup(self, k: int, alpha: float = DEFAULT_ALPHA, eos: Iterable[int] = ()) -> list[int]:
        return list(self.offer(k, alpha, eos).tokens)

    def offer(self, k: int, alpha: float = DEFAULT_ALPHA, eos: Iterable[int] = ()) -> Proposal:
        """``lookup``'s tokens with their support: the share of the match's occurrences that the
        first token followed."""
        m, automaton, state = self.match()
        n = draft_length(m, k, alpha)
        if n == 0:
            return Proposal()
        eos = eos if isinstance(eos, frozenset) else frozenset(eos)
        tokens = automaton.continuation(state, n, eos)
        return Proposal(tokens, support=automaton.share(state, tokens[0]) if tokens else None)


class SuffixDrafter(Drafter):
    """Longest-match drafting over the request and earlier requests.

    ``begin`` starts a request: a prompt that extends the tokens this drafter saw (a
    follow-up turn that resends the conversation) continues the live index; any other
    prompt moves the previous request's tokens into the history window and starts
    afresh. ``history`` shares one ``SuffixHistory`` between drafters (one per request,
    as the server builds them); its owner then adds finished requests with
    ``history.add`` and ``max_history_tokens`` is the history's own.
    """

    name = "suffix"
    branches = True  # the match's most probable continuations (suffix_tree)

    def __init__(
        self,
        *,
        max_history_tokens: int = DEFAULT_MAX_HISTORY_TOKENS,
        alpha: float = DEFAULT_ALPHA,
        eos: Iterable[int] = (),
        count_cap: int = DEFAULT_COUNT_CAP,
        history: SuffixHistory | None = None,
        tree_linear_first: bool = True,
    ):
        if max_history_tokens < 0:
            raise ValueError(f"max_history_tokens must be >= 0, got {max_history_tokens}")
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if count_cap < 1:
            raise ValueError(f"count_cap must be >= 1, got {count_cap}")
        self.alpha = alpha
        self.eos = frozenset(eos)
        self.tree_linear_first = tree_linear_first  # see suffix_tree
        self.index = SuffixIndex(max_history_tokens, count_cap, history)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        seen = self.index.tokens
        n = len(seen)
        if n and list(prompt_ids[:n]) != seen:  # exact, once per request
            self.index.new_request()
            n = 0
        self.index.extend(prompt_ids[n:])

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        self.index.extend(context[len(self.index.tokens) :])  # the context only grows
        return self.index.offer(k, self.alpha, self.eos)

    def propose_tree(self, context: Sequence[int], k: int, budget: int) -> Proposal:
        """The most probable continuations of the match, best first (``suffix_tree``)."""
        self.index.extend(context[len(self.index.tokens) :])
        return index_tree(self.index, k, budget, self.alpha, self.eos, self.tree_linear_first)
