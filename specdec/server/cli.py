"""``specdec serve``: its flags and its entry point.

Contract: ``add_serve_parser(subparsers)`` adds the ``serve`` subcommand (the drafter and
sampling flags keep ``specdec generate``'s names and defaults, except ``--draft-type``,
whose default here is ``grammar,suffix``: the tokens a request's ``response_format``
forces, else the continuation of the request and of the shared history of earlier
requests). ``cmd_serve(args)`` validates the flags, loads the model on the
inference thread, then serves with uvicorn until SIGINT/SIGTERM, after which the worker
stops and the shared memory is saved. Errors in flags, model or memory file raise
``ValueError`` / ``ModelLoadError`` before anything listens (``specdec`` prints them).
Tests: tests/server/test_cli.py.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from ..config import DTYPES, KV_BITS, add_decoder_flags, add_distributed_flags, add_draft_flags
from ..toolcall import PARSERS

if TYPE_CHECKING:  # the worker imports mlx; this module parses flags first
    from .engine.worker import InferenceWorker


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible HTTP server with speculative decoding")
    p.add_argument("--model", default="smollm2-135m", help="packaged name, .gguf path or mlx-lm dir")
    p.add_argument("--served-model-name", help="the id clients send as 'model' (default: --model)")
    p.add_argument("--model-alias", action="append", default=[], metavar="NAME",
                   help="another model name clients may send for the served model; shell "
                        "patterns allowed (e.g. 'claude-*' for Claude Code's default); repeatable")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME",
                   help="a Host header name to answer besides loopback's (a loopback-bound server "
                        "refuses other names: DNS rebinding); repeatable")
    p.add_argument("--api-key", action="append", metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on the APIs "
                        "(or $SPECDEC_API_KEY); repeat it for several tenants, each key with its "
                        "own prefix cache and drafting memory")
    p.add_argument("--api-keys-file", metavar="FILE",
                   help="more tenants' keys, one per line ('#' comments)")
    add_draft_flags(p, draft_type="grammar,suffix")
    add_decoder_flags(p)
    p.add_argument("--memory-file",
                   help="load the shared ngram-mod table from FILE and the suffix history from "
                        "FILE.suffix at start; save both there periodically and at shutdown")
    p.add_argument("--save-interval", type=float, default=60.0,
                   help="seconds between saves of a changed memory (0: only at shutdown)")
    p.add_argument("--queue-size", type=int, default=64,
                   help="requests that may wait for the model; more get 503 + Retry-After")
    p.add_argument("--max-batch", type=int, default=None,
                   help="requests decoded together, one forward per step with speculation per "
                        "request (default 32 where the model can batch; 1 = one at a time)")
    p.add_argument("--prompt-cache-bytes", type=int, default=1 << 30,
                   help="bytes of finished requests' KV caches kept for requests that start the "
                        "same way (a conversation's next turn); 0 = off")
    p.add_argument("--kv-budget", type=int, default=None,
                   help="bytes of KV cache the running batch may hold, its rows padded to the "
                        "longest prompt + max_tokens; requests that would pass it wait, one that "
                        "never fits gets 400 (default: 30%% of the machine's or GPU's memory)")
    p.add_argument("--max-body-bytes", type=int, default=4 << 20, help="larger bodies get 413")
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds to wait for the next piece of a request body; a client that "
                        "stops sending gets 408 (a refused one its refusal) and frees its slot")
    p.add_argument("--max-tokens", "-m", type=int, default=None,
                   help="cap every request's completion, whatever max_tokens it asks (default: "
                        "none; a request without max_tokens runs to EOS or the context limit)")
    p.add_argument("--context-length", type=int, default=None,
                   help="override the model's context length (max_position_embeddings)")
    p.add_argument("--temp", type=float, default=0.0, help="temperature when a request gives none")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="auto: float32 on CPU")
    p.add_argument("--kv-bits", type=int, choices=KV_BITS, help="quantize the KV cache (--draft-type none only)")
    p.add_argument("--tool-call-parser", choices=PARSERS, default="auto",
                   help="how tool calls are read from replies: auto (from the chat template), "
                        "or hermes, llama3_json, mistral, gemma; none: never")
    p.add_argument("--drain-timeout", type=float, default=30.0,
                   help="on SIGTERM, seconds in-flight requests may still run; those left then "
                        "end with an error event, and the memory is saved before exit")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    add_distributed_flags(p)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # heavy optional dependency: uvicorn, for `specdec serve` only

    from .http.app import create_app  # imports mlx and fastapi: `specdec --help` starts without them
    from .config import ServerConfig  # imports fastapi: `specdec --help` starts without it
    from .http.metrics import Metrics  # imports prometheus_client: as above
    from .engine.worker import InferenceWorker  # imports mlx: `specdec --help` starts without it

    cfg = ServerConfig.from_args(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    group = None
    if getattr(args, "distributed", False):
        # imports mlx: `specdec --help` starts without it
        from ..distributed import init_group, refuse_unsharded_features, serve_follower

        refuse_unsharded_features(tree_budget=cfg.speculation.draft_tree_budget)
        group = init_group()
        if group.rank() > 0:  # no HTTP here: run rank 0's forwards until it stops
            return serve_follower(cfg.model, cfg.dtype, group)
    metrics = Metrics()
    worker = InferenceWorker(cfg, metrics, group, getattr(args, "distributed_timeout", 120.0),
                             on_group_lost=_stop_soon)
    worker.start()  # loads the model and the memory; raises before we listen
    info = worker.memory.info()
    logging.getLogger("specdec.server").info(
        "serving %s (context %d) on http://%s:%d, draft type %s, memory %s (%d table slots, "
        "%d history tokens loaded)", cfg.model_id, worker.context_length, cfg.host, cfg.port,
        cfg.speculation.draft_type, cfg.memory_file or "in RAM only",
        info["loaded"]["table_slots"], info["loaded"]["history_tokens"])
    app = create_app(cfg, worker, metrics)
    try:
        # graceful-shutdown timeout: open streams are cancelled (their jobs with them)
        # instead of holding shutdown, and the memory save, for minutes
        # requests past the queue, the batch and room for probes get our 503 + Retry-After
        # (middleware.LimitInFlight); uvicorn's limit counts connections and, once reached,
        # refuses every request with a bare 503: only a backstop against open sockets
        # idle keep-alive connections close after 5 s
        config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=args.log_level,
                                timeout_graceful_shutdown=math.ceil(cfg.drain_timeout) + 5,
                                access_log=False, timeout_keep_alive=5,
                                limit_concurrency=cfg.max_in_flight() + 1024)
        _serve_draining(config, worker, cfg.drain_timeout)
    finally:
        # idempotent; also covers a uvicorn that failed to bind (a hung thread: stop waits 1 s)
        worker.stop()
    if worker.group_error is not None:
        # the inference thread may be stuck in a collective forever: exit without joining it
        logging.getLogger("specdec.server").error("stopped: the distributed group lost a rank")
        logging.shutdown()
        os._exit(3)
    return 0


def _serve_draining(config: Any, worker: InferenceWorker, seconds: float) -> None:
    """uvicorn's server, whose first SIGTERM (or Ctrl-C) drains: in-flight requests run
    up to ``--drain-timeout``, then end with an error event; the worker then stops and
    saves the memory (the app's shutdown)."""
    import uvicorn  # heavy optional dependency: uvicorn, for `specdec serve` only

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            worker.drain(seconds)
            super().handle_exit(sig, frame)

    DrainingServer(config).run()


def _stop_soon() -> None:
    """Stop serving (as SIGTERM would) once the 503s already answered have gone out."""
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
