"""``specdec serve``: an OpenAI-compatible HTTP server with speculative decoding.

Modules, each with its contract in its docstring:
- ``cli``: the ``serve`` subcommand's flags and entry point.
- ``config``: ``ServerConfig``, validated flags.
- ``app``: the FastAPI routes (checks every request completely before queueing it).
- ``middleware``: request counting, API key, body size limit.
- ``schemas``: pydantic request bodies (strict OpenAI parameters + ``speculative``).
- ``responses``: OpenAI response and stream-chunk shapes.
- ``worker``: the one inference thread, its bounded queue and cancellation.
- ``memory``: the shared ngram-mod table and suffix history, atomic persistence.
- ``metrics``: Prometheus metrics.
- ``errors``: OpenAI-style error bodies and handlers.

Importing this package does not import mlx (the worker loads the model on its thread).
"""
