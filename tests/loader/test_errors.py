"""``specdec.loader.errors``: one exception type, carrying the message that says what to do."""

import pytest

from specdec.loader import ModelLoadError as exported
from specdec.loader.errors import ModelLoadError


def test_model_load_error_is_the_loaders_one_exported_type_and_keeps_its_message():
    assert exported is ModelLoadError and issubclass(ModelLoadError, Exception)
    with pytest.raises(ModelLoadError, match="pip install x"):
        raise ModelLoadError("missing x: pip install x")
