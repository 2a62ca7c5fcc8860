"""The native peers' own side (llama.cpp, transformers): what runs inside their child process.

Contract: loaded by file path in a child (``peer_process``), so it imports only the standard
library at the top and nothing relative. ``serve(file, cls, args)`` builds ``cls(*args)``
from ``file`` and answers one JSON request per stdin line (``{"method", "kwargs"}``) with one
JSON reply per stdout line (``{"result"}`` or ``{"error"}``) until stdin closes. Each peer
model's ``baseline``/``speculative`` return a ``PeerRun`` as a dict, timed here so the pipe
costs nothing in the numbers. Tests: tests/bench/test_native_peers.py,
tests/bench/test_peers.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

LLAMA_CPP_N_CTX = 4096


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


class Clock:
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


def collect(stream: Iterator[int], is_eos: Callable[[int], bool], max_tokens: int,
            clock: Clock) -> PeerRun:
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


class HFModel:
    """transformers' greedy and prompt-lookup ``generate`` on the GGUF, float32, torch CPU."""

    def __init__(self, path: str):
        import torch  # optional heavy dependency: the transformers peer only
        from transformers import AutoModelForCausalLM  # heavy: the transformers peer only
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

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> dict[str, Any]:
        return asdict(self._run(prompt_ids, max_tokens, None))

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> dict[str, Any]:
        return asdict(self._run(prompt_ids, max_tokens, k))

    def _run(self, prompt_ids: list[int], max_tokens: int, k: int | None) -> PeerRun:
        import torch  # optional heavy dependency: the transformers peer only
        from transformers.generation.streamers import BaseStreamer  # heavy: as above

        clock = Clock()

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


class LlamaCppModel:
    """llama-cpp-python greedy vs its LlamaPromptLookupDecoding, on the GGUF's own kernels."""

    def __init__(self, path: str, n_ctx: int = LLAMA_CPP_N_CTX):
        import llama_cpp  # optional native dependency: the llama.cpp peer only
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self._llama_cpp, self._pld, self.path = llama_cpp, LlamaPromptLookupDecoding, path
        threads = os.cpu_count() or 1
        self.common = {"model_path": path, "n_ctx": n_ctx, "n_threads": threads,
                       "n_threads_batch": threads, "verbose": False}
        t = time.perf_counter()
        self.plain = llama_cpp.Llama(**self.common)
        # A separate instance: a draft model forces logits_all=True at construction, which
        # would also slow the baseline's prefill if they shared one. Pass it explicitly too:
        # llama-cpp-python sizes its logits buffer from the argument, not the forced value,
        # so without it any sequence past n_batch (512) tokens overflows that buffer.
        self.spec = llama_cpp.Llama(**self.common, logits_all=True,
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
        stream = llm.generate(prompt_ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0, reset=True)
        return collect(stream, self._is_eos, max_tokens, Clock())

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> dict[str, Any]:
        return asdict(self._run(self.plain, prompt_ids, max_tokens))

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> dict[str, Any]:
        self.spec.draft_model = self._pld(num_pred_tokens=k)  # read anew by each generate()
        return asdict(self._run(self.spec, prompt_ids, max_tokens, k))

    def scores(self, prompt_ids: list[int], out: str) -> str:
        """Every position's logits for ``prompt_ids`` (one forward), saved to ``out`` (.npy):
        the loader's cross-check reads them."""
        self.spec.reset()
        self.spec.eval(prompt_ids)
        np.save(out, np.array(self.spec.scores[: len(prompt_ids)], dtype=np.float32))
        return out

    def close(self) -> None:
        """Free both contexts now: Llama.__del__ raises if left to interpreter exit."""
        self.plain.close()
        self.spec.close()


def load_class(file: str, name: str) -> Any:
    """Class ``name`` from the module at path ``file`` (no package __init__ runs: those may
    import mlx, which a native peer's process must not load)."""
    spec = importlib.util.spec_from_file_location(f"_peer_{name}", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} is not a Python module a peer can be loaded from")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def serve(file: str, name: str, args: list[Any]) -> None:
    """The child's loop: build the peer, then one JSON reply per JSON request line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the reply stream
    try:
        peer = load_class(file, name)(*args)
    except Exception as e:  # noqa: BLE001 - any load failure goes to the parent, as a note
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}), file=out, flush=True)
        return
    print(json.dumps({"result": {"load_s": getattr(peer, "load_s", 0.0)}}), file=out, flush=True)
    for line in sys.stdin:  # EOF (the parent closed or died) ends the child
        req = json.loads(line)
        try:
            reply = {"result": getattr(peer, req["method"])(**req["kwargs"])}
        except Exception as e:  # noqa: BLE001 - the parent re-raises it; keep serving
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), file=out, flush=True)
    close = getattr(peer, "close", None)
    if close is not None:
        close()
