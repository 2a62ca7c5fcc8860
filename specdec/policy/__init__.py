"""Layer 3: cost policies that shape a step (the token-tree shaper)."""
