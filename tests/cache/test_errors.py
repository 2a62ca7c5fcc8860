"""``specdec.cache.errors``: what each error promises its catchers (the kind of exception
they are, and the re-export through ``cache.rollback``)."""

from specdec.cache import rollback
from specdec.cache.errors import RollbackError, UnsupportedCacheError


def test_the_errors_are_the_ones_rollback_raises_and_catchable_by_kind():
    assert rollback.RollbackError is RollbackError
    assert rollback.UnsupportedCacheError is UnsupportedCacheError
    assert issubclass(RollbackError, RuntimeError) and issubclass(UnsupportedCacheError, ValueError)
    assert not issubclass(RollbackError, UnsupportedCacheError)
