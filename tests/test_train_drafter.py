"""The train-drafter subcommand (specdec/train_drafter.py) is wired into ``specdec`` and validates its flags."""

from __future__ import annotations

import pytest

from specdec.cli import build_parser, main
from specdec.train_drafter import HEAD_DEFAULTS, resolve_head_flags


def _args(*flags: str):
    args = build_parser().parse_args(["train-drafter", "--output", "x", *flags])
    resolve_head_flags(args)
    return args


def test_parser_and_flag_validation(capsys):
    args = _args("--epochs", "2")
    assert args.command == "train-drafter" and args.epochs == 2 and args.draft_vocab == 8192
    assert not args.scale_features and not args.answer_only and args.init_from_target
    assert args.layer_type == "auto" and args.init_head is None
    assert _args("--init-head", "h").init_head == "h"
    assert not _args("--no-init-from-target").init_from_target
    assert _args("--draft-vocab", "4096", "--layer-type", "llama").draft_vocab == 4096
    assert _args("--scale-features").scale_features
    assert main(["train-drafter", "--output", "x", "--epochs", "0"]) == 2
    assert "--epochs" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--layer-type", "auto"], ["--draft-vocab", "8192"],
                                   ["--init-from-target"], ["--no-init-from-target"],
                                   ["--layer-type", "llama", "--draft-vocab", "100"]])
def test_init_head_refuses_head_shaping_flags(flags, capsys):
    """A start head keeps its own vocabulary, layer class and weights: an explicit flag that
    would change them (even to its default value) is refused before anything loads, never ignored."""
    with pytest.raises(ValueError, match="--init-head") as e:
        _args("--init-head", "h", *flags)
    assert all(f.removeprefix("--no-").removeprefix("--") in str(e.value) for f in flags if f[:2] == "--")
    assert main(["train-drafter", "--output", "x", "--init-head", "/nonexistent", *flags]) == 2
    assert "drop them" in capsys.readouterr().err
    args = _args("--init-head", "h")  # defaults only: the head's own are used downstream
    assert {k: getattr(args, k) for k in HEAD_DEFAULTS} == HEAD_DEFAULTS
