"""Layer 0: the types and pure rules every other layer reads (proposals, sampling
parameters, logits processors, grammars, acceptance rules, tree operations, stats, text,
the model's vocabulary size, crash-safe files). Imports nothing else of specdec.
Tests: tests/test_layers.py (the rule)."""
