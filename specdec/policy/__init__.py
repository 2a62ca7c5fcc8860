"""Layer 3: cost policies that shape a step: each row's decode policy (``drafting``: its k each
step, the cost gate ``gate`` and adaptive k ``adaptive``, built from a spec by ``build``), the
batch's block length, the token-tree shaper.
Tests: tests/policy/, tests/drafters/test_gate.py, tests/decode/test_batch.py."""
