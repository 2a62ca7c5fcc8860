"""Layer 3: cost policies that shape a step (the batch's block length, the token-tree shaper).
Tests: tests/policy/test_tree_shape.py, tests/decode/test_batch.py."""
