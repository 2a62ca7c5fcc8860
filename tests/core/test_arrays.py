"""specdec.core.arrays: typed reads of mlx arrays, with their shape checked."""

import mlx.core as mx
import mlx.nn as nn
import pytest

from specdec.core.arrays import flat_weights, floats, int_rows, ints


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
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5))
    pairs = flat_weights(model)
    assert [k for k, _ in pairs] == ["layers.0.weight", "layers.1.weight", "layers.1.bias"]
    assert [v.shape for _, v in pairs] == [(5, 4), (5, 4), (5,)]
