"""Other projects' speculative decoding (hf-transformers, llama.cpp, mlx-lm), run on the same
prompt token ids as ours.

Contract: ``make_peer(name, model, draft_model=None)`` returns a peer with ``baseline`` and
``speculative`` runs (``PeerRun``: tokens, prefill_s, decode_s) and ``close()``. A peer is
compared only with its own baseline. A missing package raises ``PeerUnavailable`` naming the
pip command, a crashed native peer ``PeerCrashed``; nothing falls back silently.
Tests: tests/bench/test_peers.py. Each peer's method and costs: docs/bench.md#peers."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from ..loader import load
from ..loader.api import resolve
from .native_peers import LLAMA_CPP_N_CTX, Clock, PeerRun, collect
from .peer_process import NATIVE_PEERS_FILE, PeerCrashed, PeerProcess, PeerUnavailable

__all__ = ["PEERS", "Peer", "PeerCrashed", "PeerRun", "PeerUnavailable", "make_peer"]

PEERS = ("hf-transformers", "llama.cpp", "mlx-lm")
INSTALL_PEERS = "pip install 'specdec[peers]'"
# transformers' GGUF loader refuses to run without accelerate; plain `torch` pulls CUDA.
INSTALL_TORCH = f"pip install torch==2.13.0 accelerate  (or {INSTALL_PEERS})"
# llama.cpp built for any x86-64 host (no -march=native, no AVX-512/AMX): a build for the
# machine that compiled it dies with SIGILL on a host whose CPU advertises what it lacks.
PORTABLE_LLAMA_CPP = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF '
                      '-DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" pip install --force-reinstall '
                      '--no-cache-dir llama-cpp-python  (or: make install-peers)')
INSTALL_LLAMA_CPP = f"{PORTABLE_LLAMA_CPP}  (builds llama.cpp, minutes)"


@dataclass(frozen=True)
class NativeSpec:
    """A peer whose native code runs in a child: where its class is, what it imports."""

    file: str
    cls: str
    needs: tuple[str, ...]  # modules that must be importable, checked before starting
    install: str  # how to get them
    hint: str  # what to do when its process crashes


NATIVE: dict[str, NativeSpec] = {
    # transformers loads GGUF only with accelerate
    "hf-transformers": NativeSpec(NATIVE_PEERS_FILE, "HFModel", ("torch", "accelerate"),
                                  INSTALL_TORCH, f"reinstall torch: {INSTALL_TORCH}"),
    "llama.cpp": NativeSpec(NATIVE_PEERS_FILE, "LlamaCppModel", ("llama_cpp",),
                            INSTALL_LLAMA_CPP,
                            f"rebuild llama-cpp-python for this CPU: {PORTABLE_LLAMA_CPP}"),
}


class Peer(Protocol):
    name: str
    method: str
    load_s: float

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> PeerRun: ...

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> PeerRun: ...

    def close(self) -> None: ...


def _check_args(prompt_ids: Iterable[int], max_tokens: int, k: int | None = None) -> list[int]:
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ValueError("prompt_ids is empty")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if k is not None and k < 1:
        raise ValueError(f"k (draft tokens per step) must be >= 1, got {k}")
    return ids


def _gguf_path(peer: str, model: str) -> str:
    kind, ref = resolve(model)
    if kind != "gguf":
        raise ValueError(f"the {peer} peer runs a GGUF file; {model!r} is not one "
                         "(give a packaged model name or a .gguf path)")
    return ref


class NativePeer:
    """A peer whose native code (torch, llama.cpp) runs in its own child process; that
    child times each run itself, so the pipe costs nothing in the numbers."""

    def __init__(self, name: str, method: str, model: str, *extra: Any):
        self.name, self.method = name, method
        self._proc = _start(name, [_gguf_path(name, model), *extra])
        self.load_s = self._proc.load_s

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> PeerRun:
        ids = _check_args(prompt_ids, max_tokens)
        return PeerRun(**self._proc.call("baseline", prompt_ids=ids, max_tokens=max_tokens))

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> PeerRun:
        ids = _check_args(prompt_ids, max_tokens, k)
        return PeerRun(**self._proc.call("speculative", prompt_ids=ids, max_tokens=max_tokens, k=k))

    def close(self) -> None:
        """Stop the child now (it frees its model there; it also stops when we exit)."""
        self._proc.close()


def _start(name: str, args: list[Any]) -> PeerProcess:
    spec = NATIVE[name]
    for module in spec.needs:
        if importlib.util.find_spec(module) is None:
            raise PeerUnavailable(f"{name} needs {module}: {spec.install}")
    return PeerProcess(name, spec.file, spec.cls, args, spec.hint)


def llama_cpp_scores(model: str, prompt_ids: list[int], out: str, n_ctx: int = 512) -> str:
    """llama.cpp's logits at every position of ``prompt_ids``, saved to ``out`` (.npy) by a
    child process (the loader's cross-check; a crash raises ``PeerCrashed``)."""
    proc = _start("llama.cpp", [_gguf_path("llama.cpp", model), n_ctx])
    try:
        return proc.call("scores", prompt_ids=list(prompt_ids), out=out)
    finally:
        proc.close()


class MlxLmPeer:
    """mlx-lm's own stream_generate, plain and with its draft-model speculation."""

    name = "mlx-lm"
    method = "draft model (num_draft_tokens=k)"

    def __init__(self, model: str, draft_model: str | None = None,
                 loaded: dict[str, tuple[Any, Any]] | None = None):
        if importlib.util.find_spec("mlx_lm") is None:
            raise PeerUnavailable("mlx-lm peer needs mlx-lm: pip install mlx-lm")

        t = time.perf_counter()
        # The dtype policy ours uses (float32 on the CPU): the same weights as our engine.
        loaded = loaded or {}
        pair: tuple[Any, Any] = loaded.get(model) or load(model)  # (mlx-lm model, tokenizer)
        self.model, self.tokenizer = pair
        self.draft: Any = None
        if draft_model is not None:
            self.draft, draft_tok = loaded.get(draft_model) or load(draft_model)
            if draft_tok.vocab_size != self.tokenizer.vocab_size or \
                    draft_tok.get_vocab() != self.tokenizer.get_vocab():
                raise ValueError(f"mlx-lm speculation needs one tokenizer: {draft_model!r} "
                                 f"and {model!r} have different vocabularies")
            self.method = f"draft model {draft_model} (num_draft_tokens=k)"
        self.load_s = time.perf_counter() - t
        self.eos = set(self.tokenizer.eos_token_ids)

    def _stream(self, prompt_ids: list[int], max_tokens: int, **extra: Any) -> Iterator[int]:
        # mlx-lm (checked for above) imports mlx: bench.cli, so `specdec --help`, imports this module
        from mlx_lm.generate import stream_generate

        for resp in stream_generate(self.model, self.tokenizer, prompt_ids,
                                    max_tokens=max_tokens, **extra):
            # Its last response (finish_reason set) carries the final token: the EOS itself
            # when the reason is "stop", which _collect then drops like any other EOS.
            yield resp.token

    def _run(self, prompt_ids: list[int], max_tokens: int, **extra: Any) -> PeerRun:
        clock = Clock()
        stream = self._stream(prompt_ids, max_tokens, **extra)
        return collect(stream, lambda t: t in self.eos, max_tokens, clock)

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> PeerRun:
        return self._run(_check_args(prompt_ids, max_tokens), max_tokens)

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> PeerRun:
        ids = _check_args(prompt_ids, max_tokens, k)
        if self.draft is None:
            raise PeerUnavailable("mlx-lm has no n-gram drafter; give a draft model")
        return self._run(ids, max_tokens, draft_model=self.draft, num_draft_tokens=k)

    def close(self) -> None:
        """Nothing to free early (mlx arrays go with the object); here for the protocol."""


def make_peer(name: str, model: str, draft_model: str | None = None,
              loaded: dict[str, tuple[Any, Any]] | None = None) -> Peer:
    """Load peer ``name`` on ``model`` (a packaged name or path); docs/bench.md#peers.
    ``loaded`` maps model names to (model, tokenizer) already in memory: mlx-lm runs the
    very same weights as ours, and a second copy of a 1.5B float32 model would not fit
    beside the others in 24 GiB."""
    if name == "hf-transformers":
        return NativePeer(name, "prompt lookup (prompt_lookup_num_tokens=k)", model)
    if name == "llama.cpp":
        return NativePeer(name, "LlamaPromptLookupDecoding (num_pred_tokens=k)", model,
                          LLAMA_CPP_N_CTX)
    if name == "mlx-lm":
        return MlxLmPeer(model, draft_model, loaded or {})
    raise ValueError(f"unknown peer {name!r}; use one of: {', '.join(PEERS)}")
