"""The cache package's checked errors (``rollback`` re-exports them; ``recurrent`` raises them
too, and imports them from here so the two modules do not import each other).
Tests: tests/cache/test_errors.py, tests/cache/test_rollback.py,
tests/cache/test_recurrent.py."""


class RollbackError(RuntimeError):
    """A cache could not remove the requested positions."""


class UnsupportedCacheError(ValueError):
    """The model's cache kind cannot roll back, so speculation is impossible."""
