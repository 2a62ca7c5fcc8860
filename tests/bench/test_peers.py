"""The bench's peers on real models: each is lossless against its own baseline, and the
mlx-lm peer's plain decoding is exactly ours (same weights, same kernels)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import INSTALL_PEERS, plain_prefix, requires

from specdec.bench import peers as peers_module
from specdec.bench.peers import (PEERS, NativeSpec, PeerCrashed, PeerRun, PeerUnavailable,
                                  make_peer)

CRASHING = str(Path(__file__).resolve().parents[1] / "crashing_peer.py")

MODEL = "smollm2-135m"
MAX_TOKENS = 32
PROMPT = "code_textwrap_doc"  # prompt_ids' text


_PEERS: dict[tuple, object] = {}  # (name, model, draft) -> peer
# what each peer imports; a test of a peer whose packages are missing skips (requires)
NEEDS = {"hf-transformers": requires("torch", "accelerate", pip=INSTALL_PEERS),
         "llama.cpp": requires("llama-cpp-python", pip=INSTALL_PEERS)}


def peer(name: str, model: str = MODEL, draft: str | None = None):
    # One load per (peer, model) for the whole module.
    key = (name, model, draft)
    if key not in _PEERS:
        _PEERS[key] = make_peer(name, model, draft)
    return _PEERS[key]


@pytest.fixture(scope="module")
def prompt_ids(smollm):
    from specdec.prompts import parity_prompts
    from specdec.core.text import encode_prompt

    _, tokenizer = smollm
    return encode_prompt(tokenizer, parity_prompts()[PROMPT])


@pytest.fixture(scope="module", autouse=True)
def _close_peers():
    yield
    for p in _PEERS.values():
        p.close()  # now, not in __del__ at interpreter exit (llama.cpp fails there)
    _PEERS.clear()  # and let their models go: later test modules load their own


def _check_run(run: PeerRun, max_tokens: int) -> None:
    assert 0 < len(run.tokens) <= max_tokens
    assert all(isinstance(t, int) for t in run.tokens)
    assert run.prefill_s > 0
    assert run.decode_s > 0 if len(run.tokens) > 1 else run.decode_s >= 0


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS[n]) for n in ["hf-transformers", "llama.cpp"]])
def test_prompt_lookup_peer_is_lossless_against_itself(name, prompt_ids):
    p = peer(name)
    base = p.baseline(prompt_ids, MAX_TOKENS)
    spec = p.speculative(prompt_ids, MAX_TOKENS, 4)
    _check_run(base, MAX_TOKENS)
    _check_run(spec, MAX_TOKENS)
    assert spec.tokens == base.tokens
    # A second run (its own prompt evaluation) agrees.
    assert p.baseline(prompt_ids, MAX_TOKENS).tokens == base.tokens


@pytest.mark.slow
@NEEDS["llama.cpp"]
def test_llama_cpp_prompt_lookup_past_its_batch_size(prompt_ids):
    # llama-cpp-python sizes its logits buffer by n_batch (512) unless logits_all=True is
    # passed explicitly; a longer sequence then failed with a broadcast error.
    p = peer("llama.cpp")
    long_ids = prompt_ids + prompt_ids[1:]
    assert len(long_ids) > 512
    assert p.speculative(long_ids, 8, 4).tokens == p.baseline(long_ids, 8).tokens


@pytest.mark.slow
def test_mlx_lm_plain_equals_ours(prompt_ids):
    from specdec.prompts import parity_prompts

    p = peer("mlx-lm")
    base = p.baseline(prompt_ids, MAX_TOKENS)
    _check_run(base, MAX_TOKENS)
    # our plain decoding of prompt_ids' text, cut from the session's shared reference (tests/parity's)
    assert base.tokens == plain_prefix(MODEL, parity_prompts()[PROMPT], MAX_TOKENS)


def test_mlx_lm_without_draft_model_has_no_speculation(prompt_ids):
    p = peer("mlx-lm")
    with pytest.raises(PeerUnavailable, match="no n-gram drafter; give a draft model"):
        p.speculative(prompt_ids, 4, 4)


def test_bad_arguments_are_refused(prompt_ids):
    p = peer("mlx-lm")
    with pytest.raises(ValueError, match="empty"):
        p.baseline([], 4)
    with pytest.raises(ValueError, match="max_tokens"):
        p.baseline(prompt_ids, 0)
    with pytest.raises(ValueError, match="k "):
        p.speculative(prompt_ids, 4, 0)


def test_unknown_peer_lists_the_peers():
    with pytest.raises(ValueError) as e:
        make_peer("vllm", MODEL)
    for name in PEERS:
        assert name in str(e.value)


def test_hf_without_torch_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # Python's own "cannot be imported" marker
    with pytest.raises(PeerUnavailable, match=r"pip install torch==2\.13\.0"):
        make_peer("hf-transformers", MODEL)


# --- a native peer that crashes: its failure alone (a lone PeerProcess: test_peer_process.py)

def test_a_peer_that_crashes_while_loading_is_reported_by_make_peer(monkeypatch):
    crashing = NativeSpec(CRASHING, "Crashing", (), "", "rebuild it")
    monkeypatch.setitem(peers_module.NATIVE, "llama.cpp", crashing)
    monkeypatch.setattr(peers_module, "LLAMA_CPP_N_CTX", "SIGILL at load")
    with pytest.raises(PeerCrashed, match="^llama.cpp crashed: SIGILL .* — rebuild it$"):
        make_peer("llama.cpp", MODEL)


@pytest.mark.slow
def test_the_bench_reports_a_crashed_peer_and_goes_on(monkeypatch, smollm):
    """``specdec bench --peers llama.cpp`` on a host where llama.cpp dies of SIGILL: the
    report says so for llama.cpp, and our runs are all there (the bench went on)."""
    from bench.test_runner import _small_plan

    from specdec.bench.runner import run_plan

    crashing = NativeSpec(CRASHING, "Crashing", (), "", "rebuild it")
    monkeypatch.setitem(peers_module.NATIVE, "llama.cpp", crashing)
    plan = _small_plan(peers=("llama.cpp",))
    plan.workloads = plan.workloads[:1]
    result = run_plan(plan, target=smollm)  # the session's model: no second load
    notes = result.peer_notes
    assert notes["llama.cpp: plain"] == "failed: llama.cpp crashed: SIGILL (illegal instruction) — rebuild it"
    assert all("llama.cpp" not in r.source for r in result.records)
    assert result.records and {r.source for r in result.records} == {"specdec"}
    assert len({r.config for r in result.records}) == 2  # plain and the ngram config
