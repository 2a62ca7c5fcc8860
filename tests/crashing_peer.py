"""A peer whose process dies the way a native library does (a real signal, a real abort):
the bench and pytest must report it as that peer's failure and go on. Loaded by file path
inside the peer's child process, like specdec/bench/native_peers.py."""

from __future__ import annotations

import os
import signal


class Crashing:
    """``Crashing(path, how)``: dies by ``how`` (a signal's name, or "abort") when asked to
    run; a ``how`` ending in " at load" dies while loading. Any other ``how`` (such as the
    llama.cpp peer's n_ctx) means SIGILL."""

    def __init__(self, path: str, how: object = "SIGILL"):
        how = how if isinstance(how, str) else "SIGILL"
        self.how, self.load_s = how.removesuffix(" at load"), 0.01
        if how.endswith(" at load"):
            self._die()

    def _die(self) -> None:
        if self.how == "abort":
            os.abort()  # SIGABRT, as a failed assertion in C does
        os.kill(os.getpid(), getattr(signal, self.how))

    def baseline(self, prompt_ids: list[int], max_tokens: int) -> dict:
        self._die()
        return {}

    def speculative(self, prompt_ids: list[int], max_tokens: int, k: int) -> dict:
        self._die()
        return {}
