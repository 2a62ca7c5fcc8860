"""``specdec bench``: real workloads, strict N×N parity, the oracle ceiling, and peers in one run.

Modules: ``workloads`` (JSONL format, built-in real-text workloads, prompt fitting),
``configs`` (drafter config specs and sweeps), ``runner`` (the interleaved measurement
loop), ``analysis`` (medians, speedups, parity, per-position acceptance, zero-cost bound, oracle), ``oracle`` (oracle drafter, replay bounds),
``report`` and ``plots`` (Markdown, JSON, PNG), ``profiles`` (named experiments),
``peers`` (HF transformers, llama.cpp and mlx-lm on the same prompts), ``cli``.
Tests: tests/bench/.
"""
