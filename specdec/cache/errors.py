"""The cache package's checked errors (``rollback`` re-exports them; ``recurrent`` raises them
too, and imports them from here so the two modules do not import each other).
Tests: tests/cache/test_errors.py, tests/cache/test_rollback.py,
tests/cache/test_recurrent.py."""


class RollbackError(RuntimeError):
    """A cache could not remove the requested positions."""


class UnsupportedCacheError(ValueError):
    """The model's cache kind cannot roll back, so speculation is impossible."""


def refuse_quantized_speculation(kv_bits: int | None, speculative: bool, fix: str) -> None:
    """The one check for a quantized KV cache under speculation: refused, because it is not
    lossless (docs/caches.md#a-quantized-kv-cache-decodes-plainly). A verified block's keys
    and values come from matmuls over several rows, which sum in another order than a
    one-token step's (OpenBLAS picks kernels by row count; GPU backends too); full precision carries
    that as a last-bit difference that flips a token only at a near-tie, but quantizing
    rounds it to another level often enough to change the output (lab/kv-bits-speculation).
    ``fix``: the caller's way out (its flag or keyword)."""
    if kv_bits is not None and speculative:
        raise UnsupportedCacheError(
            f"a quantized KV cache (kv_bits={kv_bits}) is not lossless under speculation: a verified "
            "block's keys and values round to other quantized levels than one-token steps', so "
            f"drafting would change the output; {fix}")
