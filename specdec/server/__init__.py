"""``specdec serve``: an OpenAI-compatible HTTP server with speculative decoding.

Modules (each states its contract): cli, config, app (routes), api, middleware, schemas,
responses, worker, batcher, memory, metrics, errors, events, reasoning, kv_budget,
tool_schemas, tool_calls; other wires as adapters onto ``api.chat``: anthropic,
openai_responses, ollama. Importing this package does not import mlx.
Tests: tests/server/."""
