"""``specdec serve``: an OpenAI-compatible HTTP server with speculative decoding.

Split by concern: ``http`` (the app, middleware, errors, metrics, the body reader),
``engine`` (the front door ``api``, the worker, batcher, KV budget, events and the request
value), ``wires`` (chat/completions, anthropic, responses, ollama: each a translation of
``engine.api.Api.chat``); ``cli`` and ``config`` beside. Importing this package does not
import mlx. Tests: tests/server/ (the layout: tests/server/test_layout.py)."""
