"""Other projects' speculative decoding, run on the same prompt token ids as ours.

Contract:
- ``make_peer(name, model, draft_model=None)`` loads a peer once (``name`` in ``PEERS``)
  and returns an object with ``name``, ``method``, ``load_s`` and the methods
  ``baseline(prompt_ids, max_tokens)`` (the peer's own plain greedy decoding),
  ``speculative(prompt_ids, max_tokens, k)`` (its own lossless speculation, ``k`` draft
  tokens per step), each returning a ``PeerRun``, and ``close()`` (call it when done).
  A peer is only ever compared with itself (speedup and token parity against its own
  baseline); its absolute tok/s is shown next to ours for context.
- ``PeerRun.tokens`` are the generated ids, prompt excluded, stopped at the peer's own
  end-of-generation tokens (excluded) or at ``max_tokens``. ``prefill_s`` is the time from
  the call to the first generated token (the prompt is evaluated from scratch on every
  call: no peer reuses a cached prompt between runs); ``decode_s`` is the time from the
  first to the last kept token, so ``decode_tokens_per_s`` = (len(tokens) - 1) / decode_s.
- Peers:
  * ``hf-transformers``: the GGUF dequantized by transformers to a float32 torch model on
    the CPU; ``generate(do_sample=False)`` vs ``generate(..., prompt_lookup_num_tokens=k)``.
    Needs torch (``pip install torch==2.13.0``: the CPU wheel) and accelerate. It runs in
    a worker process without the OpenBLAS preload and with ``OMP_WAIT_POLICY=PASSIVE``
    (both made torch several times slower here); the worker does its own timing.
  * ``llama.cpp``: llama-cpp-python on the GGUF with llama.cpp's own quantized kernels,
    so its absolute tok/s is not comparable with float32 peers; greedy ``Llama.generate``
    vs a second ``Llama`` with ``draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k)``
    (that forces ``logits_all=True``, which also makes its prefill compute every prompt
    position's logits: a real cost of this peer, measured as is).
  * ``mlx-lm``: ``mlx_lm.generate.stream_generate`` on the same float32 weights we use
    (``specdec.loader.load``); speculative = its draft-model speculation
    (``draft_model=..., num_draft_tokens=k``). It has no n-gram drafter, so without a
    draft model ``speculative`` raises ``PeerUnavailable``.
  ``draft_model`` is used by mlx-lm only; the other two always run prompt lookup, as
  their ``method`` says, with their default n-gram sizes (up to 2 tokens).
- A peer whose package is missing raises ``PeerUnavailable`` naming the pip command; bad
  arguments raise ``ValueError``. Nothing falls back to something else silently.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

PEERS = ("hf-transformers", "llama.cpp", "mlx-lm")
INSTALL_PEERS = "pip install 'specdec[peers]'"
# transformers' GGUF loader refuses to run without accelerate; plain `torch` pulls CUDA.
INSTALL_TORCH = f"pip install torch==2.13.0 accelerate  (or {INSTALL_PEERS})"
INSTALL_LLAMA_CPP = f"pip install llama-cpp-python  (builds llama.cpp, minutes; or {INSTALL_PEERS})"
LLAMA_CPP_N_CTX = 4096


class PeerUnavailable(Exception):
    """A peer (or one of its modes) cannot run here; the message says what to install."""


@dataclass
class PeerRun:
    tokens: list[int]  # generated ids, prompt and end-of-generation token excluded
    prefill_s: float  # call -> first generated token
    decode_s: float  # first -> last kept token

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first, per second of decode_s; NaN with fewer than 2 tokens."""
        if len(self.tokens) < 2 or self.decode_s <= 0:
            return math.nan
        return (len(self.tokens) - 1) / self.decode_s


class Peer(Protocol):
    name: str
    method: str
    load_s: float

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> PeerRun: ...

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> PeerRun: ...

    def close(self) -> None: ...


class _Clock:
    """Timestamps of token arrivals, so every peer reports prefill/decode the same way.

    Tokens may arrive in blocks (accepted drafts); ``decode_s`` ends at the arrival of the
    block holding the last kept token, not at a later block that only carried the EOS.
    """

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.arrivals: list[tuple[float, int]] = []  # (time, tokens received so far)

    def mark(self, n_new: int) -> None:
        total = self.arrivals[-1][1] if self.arrivals else 0
        self.arrivals.append((time.perf_counter(), total + n_new))

    def run(self, tokens: list[int]) -> PeerRun:
        if not self.arrivals:
            raise RuntimeError("peer produced no token at all (not even an EOS)")
        first = self.arrivals[0][0]
        last = next(t for t, total in self.arrivals if total >= len(tokens))
        return PeerRun([int(t) for t in tokens], first - self.t0, last - first)


def _collect(stream: Iterator[int], is_eos: Callable[[int], bool], max_tokens: int,
             clock: _Clock) -> PeerRun:
    """Consume a one-token-at-a-time stream up to EOS (excluded) or ``max_tokens``."""
    tokens: list[int] = []
    try:
        for tok in stream:
            clock.mark(1)
            if is_eos(int(tok)):
                break
            tokens.append(int(tok))
            if len(tokens) >= max_tokens:
                break
    finally:
        close = getattr(stream, "close", None)
        if close is not None:  # run the generator's cleanup now, before the next run
            close()
    return clock.run(tokens)


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
    from ..loader.api import resolve

    kind, ref = resolve(model)
    if kind != "gguf":
        raise ValueError(f"the {peer} peer runs a GGUF file; {model!r} is not one "
                         "(give a packaged model name or a .gguf path)")
    return ref


class _HFModel:
    """The transformers side of the hf-transformers peer; lives in the worker process."""

    def __init__(self, path: str):
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        torch.set_num_threads(os.cpu_count() or 1)
        t = time.perf_counter()
        # The prompt arrives as ids, so no tokenizer is loaded (that is the slow part).
        self.model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32)
        self.model.eval()
        self.load_s = time.perf_counter() - t
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            raise ValueError(f"{path}: the GGUF names no EOS token; transformers cannot stop")
        self.eos = {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}

    def run(self, prompt_ids: list[int], max_tokens: int, k: int | None) -> PeerRun:
        import torch
        from transformers.generation.streamers import BaseStreamer

        clock = _Clock()

        class _Stamp(BaseStreamer):
            # generate() first puts the prompt itself; every later put is new tokens.
            seen_prompt = False

            def put(self, value: Any) -> None:
                if self.seen_prompt:
                    clock.mark(int(value.numel()))
                self.seen_prompt = True

            def end(self) -> None:
                pass

        extra = {} if k is None else {"prompt_lookup_num_tokens": k}
        ids = torch.tensor([prompt_ids], dtype=torch.long)
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=1,
                max_new_tokens=max_tokens, eos_token_id=sorted(self.eos),
                pad_token_id=min(self.eos), streamer=_Stamp(), **extra)
        new = out[0, len(prompt_ids):].tolist()
        end = next((i for i, t in enumerate(new) if t in self.eos), len(new))
        return clock.run(new[:min(end, max_tokens)])


def _hf_worker(path: str) -> None:
    """Worker loop: one JSON request per stdin line, one JSON reply per stdout line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the reply stream
    try:
        model = _HFModel(path)
    except Exception as e:  # noqa: BLE001 - any load failure goes to the parent, as a note
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), file=out, flush=True)
        return
    print(json.dumps({"load_s": model.load_s}), file=out, flush=True)
    for line in sys.stdin:  # EOF (the parent closed or died) ends the worker
        req = json.loads(line)
        try:
            reply = asdict(model.run(req["prompt_ids"], req["max_tokens"], req["k"]))
        except Exception as e:  # noqa: BLE001 - the parent re-raises it; keep serving
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), file=out, flush=True)


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The OpenBLAS that mlx needs preloaded interposes on torch's BLAS calls: HF prefill
    # got ~10x slower with it here. And torch's OpenMP threads spin-wait by default, which
    # made decoding 4-5x slower on shared cores; a passive wait policy fixes that.
    kept = [p for p in env.get("LD_PRELOAD", "").split() if "openblas" not in p]
    env["LD_PRELOAD"] = " ".join(kept)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


class HFTransformersPeer:
    """transformers' own greedy and prompt-lookup decoding on the GGUF, float32, torch CPU.

    Runs in a worker process (see ``_worker_env`` for why); the worker times each run
    itself, so the pipe costs nothing in the numbers. It exits when the pipe closes.
    """

    name = "hf-transformers"
    method = "prompt lookup (prompt_lookup_num_tokens=k)"

    def __init__(self, model: str):
        if importlib.util.find_spec("torch") is None:
            raise PeerUnavailable(f"hf-transformers needs torch (CPU build): {INSTALL_TORCH}")
        if importlib.util.find_spec("accelerate") is None:
            raise PeerUnavailable(f"transformers loads GGUF only with accelerate: {INSTALL_TORCH}")
        path = _gguf_path(self.name, model)
        # Loaded by file path, not as specdec.bench.peers: package __init__s may import mlx.
        boot = ("import importlib.util as u, sys; s = u.spec_from_file_location('_hf_peer', "
                "sys.argv[1]); m = u.module_from_spec(s); sys.modules[s.name] = m; "
                "s.loader.exec_module(m); m._hf_worker(sys.argv[2])")
        self._proc = subprocess.Popen([sys.executable, "-c", boot, __file__, path],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=_worker_env())
        try:
            self.load_s = self._reply()["load_s"]
        except RuntimeError as e:
            self.close()
            raise PeerUnavailable(f"transformers cannot load {model!r}: {e}") from None

    def _reply(self) -> dict[str, Any]:
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with code {self._proc.wait()} (see stderr)")
        msg = json.loads(line)
        if "error" in msg:
            raise RuntimeError(msg["error"])
        return msg

    def _run(self, prompt_ids: list[int], max_tokens: int, k: int | None) -> PeerRun:
        req = {"prompt_ids": prompt_ids, "max_tokens": max_tokens, "k": k}
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        return PeerRun(**self._reply())

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> PeerRun:
        return self._run(_check_args(prompt_ids, max_tokens), max_tokens, None)

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> PeerRun:
        return self._run(_check_args(prompt_ids, max_tokens, k), max_tokens, k)

    def close(self) -> None:
        """Stop the worker (it also stops by itself when this process exits)."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait()


class LlamaCppPeer:
    """llama-cpp-python greedy vs its LlamaPromptLookupDecoding, on the GGUF's own kernels."""

    name = "llama.cpp"
    method = "LlamaPromptLookupDecoding (num_pred_tokens=k)"

    def __init__(self, model: str, n_ctx: int = LLAMA_CPP_N_CTX):
        if importlib.util.find_spec("llama_cpp") is None:
            raise PeerUnavailable(f"llama.cpp peer needs llama-cpp-python: {INSTALL_LLAMA_CPP}")
        import llama_cpp
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self._pld = LlamaPromptLookupDecoding
        path = _gguf_path(self.name, model)
        threads = os.cpu_count() or 1
        common = {"model_path": path, "n_ctx": n_ctx, "n_threads": threads,
                  "n_threads_batch": threads, "verbose": False}
        t = time.perf_counter()
        self.plain = llama_cpp.Llama(**common)
        # A separate instance: a draft model forces logits_all=True at construction, which
        # would also slow the baseline's prefill if they shared one. Pass it explicitly too:
        # llama-cpp-python sizes its logits buffer from the argument, not the forced value,
        # so without it any sequence past n_batch (512) tokens overflows that buffer.
        self.spec = llama_cpp.Llama(**common, logits_all=True,
                                    draft_model=LlamaPromptLookupDecoding())
        self.load_s = time.perf_counter() - t
        vocab = llama_cpp.llama_model_get_vocab(self.plain.model)
        # llama.cpp's end-of-generation set (EOS, EOT, <|im_end|>, ...), as its server uses.
        self._is_eos = lambda tok: bool(llama_cpp.llama_vocab_is_eog(vocab, tok))
        self.n_ctx = n_ctx

    def _run(self, llm: Any, prompt_ids: list[int], max_tokens: int, k: int = 0) -> PeerRun:
        if len(prompt_ids) + max_tokens + k + 1 > self.n_ctx:
            raise ValueError(f"prompt ({len(prompt_ids)}) + max_tokens ({max_tokens}) + k "
                             f"exceeds the llama.cpp context ({self.n_ctx})")
        # Without reset, generate() reuses the KV cache of the previous run's matching
        # prefix and skips the prompt; every run must evaluate the prompt like the others.
        llm.reset()
        clock = _Clock()
        stream = llm.generate(prompt_ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0, reset=True)
        return _collect(stream, self._is_eos, max_tokens, clock)

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> PeerRun:
        return self._run(self.plain, _check_args(prompt_ids, max_tokens), max_tokens)

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> PeerRun:
        ids = _check_args(prompt_ids, max_tokens, k)
        self.spec.draft_model = self._pld(num_pred_tokens=k)  # read anew by each generate()
        return self._run(self.spec, ids, max_tokens, k)

    def close(self) -> None:
        """Free both contexts now: Llama.__del__ raises if left to interpreter exit."""
        self.plain.close()
        self.spec.close()


class MlxLmPeer:
    """mlx-lm's own stream_generate, plain and with its draft-model speculation."""

    name = "mlx-lm"
    method = "draft model (num_draft_tokens=k)"

    def __init__(self, model: str, draft_model: str | None = None,
                 loaded: dict[str, tuple[Any, Any]] | None = None):
        if importlib.util.find_spec("mlx_lm") is None:
            raise PeerUnavailable("mlx-lm peer needs mlx-lm: pip install mlx-lm")
        from ..loader import load

        t = time.perf_counter()
        # The dtype policy ours uses (float32 on the CPU): the same weights as our engine.
        loaded = loaded or {}
        self.model, self.tokenizer = loaded.get(model) or load(model)
        self.draft = None
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
        from mlx_lm.generate import stream_generate

        for resp in stream_generate(self.model, self.tokenizer, prompt_ids,
                                    max_tokens=max_tokens, **extra):
            # Its last response (finish_reason set) carries the final token: the EOS itself
            # when the reason is "stop", which _collect then drops like any other EOS.
            yield resp.token

    def _run(self, prompt_ids: list[int], max_tokens: int, **extra: Any) -> PeerRun:
        clock = _Clock()
        stream = self._stream(prompt_ids, max_tokens, **extra)
        return _collect(stream, lambda t: t in self.eos, max_tokens, clock)

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
    """Load peer ``name`` on ``model`` (a packaged name or path); see the module docstring.
    ``loaded`` maps model names to (model, tokenizer) already in memory: mlx-lm runs the
    very same weights as ours, and a second copy of a 1.5B float32 model would not fit
    beside the others in 24 GiB."""
    if name == "hf-transformers":
        return HFTransformersPeer(model)
    if name == "llama.cpp":
        return LlamaCppPeer(model)
    if name == "mlx-lm":
        return MlxLmPeer(model, draft_model, loaded or {})
    raise ValueError(f"unknown peer {name!r}; use one of: {', '.join(PEERS)}")
