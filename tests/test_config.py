"""``specdec.config``: the CLI's flags parse to one ``RunConfig`` and each bad value is
refused with the flag to fix; files the config reads say which file failed."""

from __future__ import annotations

import argparse
import json

import pytest

from specdec.config import (RunConfig, add_decoder_flags, add_draft_flags, check_kv_bits,
                            draft_spec_from_args, tree_budget_arg)
from specdec.drafters.spec import DraftSpec


@pytest.mark.parametrize("kw, message", [
    (dict(dtype="float8"), "--dtype must be one of auto, native, float32"),
    (dict(max_tokens=0), "--max-tokens must be >= 1"),
    (dict(prefill_step_size=0), "--prefill-step-size must be >= 1"),
    (dict(prompt="a", prompt_file="b"), "give either --prompt or --prompt-file, not both"),
    (dict(kv_bits=5), "--kv-bits must be one of 2, 3, 4, 6, 8"),
    (dict(kv_bits=4), "not lossless under speculation.*add --draft-type none"),
    (dict(decoder="beam"), "--decoder must be one of speculative, wedlm, got 'beam'"),
    (dict(decoder="wedlm", top_k=5, kv_bits=4), "--top-k, --kv-bits not supported with --decoder wedlm"),
])
def test_each_bad_value_names_its_flag(kw, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**kw).validate()


def test_the_defaults_validate_and_kv_bits_accepts_its_values():
    RunConfig().validate()
    RunConfig(decoder="wedlm", temp=0.7).validate()
    for bits in (None, 2, 3, 4, 6, 8):
        check_kv_bits(bits)


def test_from_args_takes_the_flags_it_knows():
    p = argparse.ArgumentParser()
    add_draft_flags(p)
    add_decoder_flags(p)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--unrelated", default="x")
    ns = p.parse_args(["--draft-type", "suffix", "--num-draft-tokens", "6", "--max-tokens", "9",
                       "--draft-tree-budget", "auto"])
    cfg = RunConfig.from_args(ns)
    assert cfg.max_tokens == 9 and cfg.spec == draft_spec_from_args(ns)
    spec = cfg.spec
    assert (spec.draft_type, spec.num_draft_tokens, spec.draft_tree_budget) == ("suffix", 6, "auto")
    with pytest.raises(SystemExit):  # argparse's own error for the flag
        p.parse_args(["--draft-tree-budget", "-1"])


def test_tree_budget_arg_speaks_argparse():
    assert tree_budget_arg("7") == 7 and tree_budget_arg("auto") == "auto"
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 0 or 'auto'"):
        tree_budget_arg("many")


def test_json_schema_and_prompt_files_are_read_or_named(tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps({"type": "object"}))
    assert RunConfig(json_schema=str(schema)).response_format() == {
        "type": "json_schema", "json_schema": {"name": "person", "schema": {"type": "object"}}}
    assert RunConfig().response_format() is None
    schema.write_text("{not json")
    with pytest.raises(ValueError, match=f"--json-schema {schema}: not a readable JSON file"):
        RunConfig(json_schema=str(schema)).response_format()
    with pytest.raises(ValueError, match="--prompt-file .*absent.txt does not exist"):
        RunConfig(prompt_file=str(tmp_path / "absent.txt")).read_prompt()
    (tmp_path / "p.txt").write_text("hello")
    assert RunConfig(prompt_file=str(tmp_path / "p.txt")).read_prompt() == "hello"
    assert RunConfig(prompt="hi").read_prompt() == "hi"


def test_engine_kwargs_carry_the_run_as_one_generation():
    """#45: the CLI's flags become one ``Generation`` (``--num-draft-tokens`` in its spec:
    one road, the spec's default when left out) and how the prompt is encoded."""
    spec = DraftSpec("ngram", num_draft_tokens=3)
    cfg = RunConfig(raw=True, max_tokens=5, temp=0.5, stop=["x"], kv_bits=None, spec=spec)
    kw = cfg.engine_kwargs()
    gen = kw["generation"]
    assert (kw["chat"], gen.max_tokens, gen.sampling.temperature, gen.k, gen.draft) == (False, 5, 0.5, 3, spec)
    assert (gen.stop, gen.kv_bits, gen.prefill_step_size) == (("x",), None, cfg.prefill_step_size)
    plain = RunConfig(kv_bits=4, spec=DraftSpec("none"))
    plain.validate()  # a quantized cache decodes plainly
    assert plain.generation().kv_bits == 4
    assert RunConfig().engine_kwargs()["chat"] is None
    assert RunConfig().generation().k == DraftSpec.num_draft_tokens
