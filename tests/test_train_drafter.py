"""The train-drafter subcommand (specdec/train_drafter.py) is wired into ``specdec`` and validates its flags."""

from __future__ import annotations

from specdec.cli import build_parser, main


def test_parser_and_flag_validation(capsys):
    args = build_parser().parse_args(["train-drafter", "--output", "x", "--epochs", "2"])
    assert args.command == "train-drafter" and args.epochs == 2 and args.draft_vocab == 8192
    assert not args.scale_features and not args.answer_only and args.init_from_target
    assert args.layer_type == "auto" and args.init_head is None
    assert build_parser().parse_args(["train-drafter", "--output", "x", "--init-head", "h"]).init_head == "h"
    assert not build_parser().parse_args(["train-drafter", "--output", "x",
                                          "--no-init-from-target"]).init_from_target
    assert build_parser().parse_args(["train-drafter", "--output", "x", "--scale-features"]).scale_features
    assert main(["train-drafter", "--output", "x", "--epochs", "0"]) == 2
    assert "--epochs" in capsys.readouterr().err
