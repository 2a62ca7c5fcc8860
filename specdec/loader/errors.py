"""The one exception type the loader raises for problems a user can fix.

Contract: every user-facing failure in ``specdec.loader`` (missing package, unknown model
name, bad path, unsupported GGUF architecture or tensor type, bad dtype, a corrupt chunk)
raises ``ModelLoadError`` whose message says what went wrong *and* what to do about it.
Programming errors (bugs) are left as ordinary exceptions.
Tests: tests/loader/test_errors.py, tests/loader/test_api.py.
"""

from __future__ import annotations


class ModelLoadError(Exception):
    """A model could not be located, converted or loaded; the message says how to fix it."""
