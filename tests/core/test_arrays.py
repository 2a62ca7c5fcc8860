"""specdec.core.arrays: typed reads of mlx arrays, with their shape checked."""

import mlx.core as mx
import pytest

from specdec.core.arrays import floats, int_rows, ints


def test_reads_each_shape_into_python_values():
    assert ints(mx.array([3, 1, 2])) == [3, 1, 2]
    assert floats(mx.array([0.5, 2.0])) == [0.5, 2.0]
    assert int_rows(mx.array([[1, 2], [3, 4]])) == [[1, 2], [3, 4]]
    assert int_rows(mx.array([[True, False]])) == [[True, False]]


@pytest.mark.parametrize("read, value", [(ints, [[1]]), (floats, 1.0), (int_rows, [1, 2])])
def test_a_wrong_shape_is_refused_with_its_shape(read, value):
    with pytest.raises(ValueError, match="expected a .-D array, got shape"):
        read(mx.array(value))


def test_flat_weights_are_the_models_named_arrays():
    from conftest import cached_tiny

    from specdec.core.arrays import flat_weights

    model = cached_tiny("llama")
    pairs = flat_weights(model)
    assert pairs and all(isinstance(k, str) and isinstance(v, mx.array) for k, v in pairs)
    assert pairs[0][0] == "model.embed_tokens.weight"
