"""core.model: the seam the engine calls is what mlx-lm's classes and the sharded leader are,
and what other objects are not."""

from conftest import cached_tiny

from specdec.core.model import Model
from specdec.distributed import LeaderModel


def test_mlx_lm_models_and_the_sharded_leader_are_models():
    for arch in ("llama", "gemma3"):
        model = cached_tiny(arch)
        assert isinstance(model, Model) and isinstance(LeaderModel(model, None), Model)


def test_a_callable_without_layers_is_not_a_model():
    assert not isinstance(lambda inputs, cache=None: inputs, Model)
    assert not isinstance(object(), Model)
