"""Layer 1: KV caches and their one rollback contract (single request, sliding window,
quantized, batched rows, tree compaction), prompt caches and the prefix store.
Tests: tests/cache/test_rollback.py, tests/decode/test_batch.py."""
