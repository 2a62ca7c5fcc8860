"""The `specdec` command as a user runs it: real process, real default model."""

import json
import subprocess
import sys

import pytest

from specdec.backend import preload_env
from specdec.prompts import parity_prompts


def specdec(*args, input=None):
    return subprocess.run([sys.executable, "-m", "specdec", *args], capture_output=True,
                          text=True, input=input, env=preload_env(), timeout=900)


@pytest.mark.slow
def test_generate_compare_json_on_the_demo_prompt():
    # 32 tokens: the edit echoes the prompt from its first line (64 decoded twice as many)
    r = specdec("generate", "--compare", "--json", "--max-tokens", "32")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("text", "tokens", "parity", "speedup", "baseline_tokens_per_s", "spec_tokens_per_s",
                "acceptance_rate", "mean_acceptance_length", "verify_steps"):
        assert key in out
    assert out["parity"] is True
    assert len(out["tokens"]) == out["baseline_tokens"] > 0
    assert out["mean_acceptance_length"] > 1.5  # an edit of real code echoes the prompt


@pytest.mark.slow
def test_generate_streams_text_from_stdin_and_stops():
    r = specdec("generate", "--prompt", "-", "--max-tokens", "40", "--stop", "\n\n", "--verbose",
                input="List three colors, one per line.")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "\n\n" not in r.stdout.strip()
    assert "mean acceptance length" in r.stderr


# a code edit of ~150 tokens read from stdin, for the commands whose point is not the demo
# prompt: the demo's ~480 are prefilled twice a run (plain and speculative), most of its CPU
EDIT = parity_prompts()["code_shlex_quote"]


@pytest.mark.slow
def test_parity_command_reports_identical():
    # 24 tokens of a code edit that echoes its prompt (48 decoded twice as many)
    r = specdec("parity", "--json", "--prompt", "-", "--max-tokens", "24", "--num-draft-tokens", "8",
                input=EDIT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["verdict"] == "identical"


def refused(capsys, *args) -> str:
    """``specdec ARGS`` run in this process (``cli.main``, which ``python -m specdec`` exits
    with): it must exit 2 before any model loads; returns what it printed to stderr. A process
    each cost ~2.5 CPU s of imports; the tests above run the real process."""
    from specdec.cli import main

    assert main(list(args)) == 2
    return capsys.readouterr().err


def test_bad_flags_fail_with_a_message(capsys):
    assert "--num-draft-tokens must be an integer >= 1" in refused(
        capsys, "generate", "--num-draft-tokens", "0", "--prompt", "hi")
    assert "no-such-model" in refused(capsys, "generate", "--model", "no-such-model", "--prompt", "hi")


@pytest.mark.slow
def test_chains_gate_adaptive_k_and_ngram_mod_memory(tmp_path, capsys):
    # a question whose answer its prompt does not hold: on an empty table ngram-mod drafts
    # nothing for it (0 of 24 tokens), so the second run's drafts come from the saved table,
    # which must hold the first run's whole answer (a drafter inserts in chunks of 32)
    table, ask = tmp_path / "mem.ngm", ("--prompt", "Name the planets of the solar system in order, one per line.")
    r = specdec("generate", "--compare", "--json", "--max-tokens", "24", "--draft-type",
                "ngram-mod,suffix,ngram", "--gate", "--adaptive-k", "--ngram-mod-file", str(table), *ask)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["parity"] is True and out["stats"]["drafter"].startswith("ngram-mod,suffix,ngram")
    assert table.exists()  # saved at exit
    r = specdec("generate", "--json", "--max-tokens", "24", "--draft-type", "ngram-mod", "--no-gate",
                "--ngram-mod-file", str(table), *ask)  # warm start: the table from the first run
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["accepted"] >= 16
    assert "--draft-model" in refused(capsys, "generate", "--draft-type", "model", "--prompt", "hi")
    assert "--ngram-mod-file has no effect" in refused(  # ngram only
        capsys, "generate", "--ngram-mod-file", str(table), "--prompt", "hi")


@pytest.mark.slow
def test_a_seed_pins_sampled_tokens_whatever_the_drafter():
    """--compare with --temp and --seed: the speculative tokens equal plain decoding's. One
    run drafting with ngram then suffix (a chain: both drafters' offers accepted and rolled
    back) instead of a run each, which paid the start, the load and the plain run twice; each
    drafter alone: tests/decode/test_step_seeded.py::test_seeded_output_equals_plain_for_every_drafter."""
    r = specdec("generate", "--compare", "--json", "--prompt", "-", "--max-tokens", "32", "--temp",
                "0.8", "--seed", "3", "--draft-type", "ngram,suffix", input=EDIT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["parity"] is True and len(out["tokens"]) == 32
    stats = out["stats"]
    assert stats["drafter"] == "ngram,suffix"
    assert stats["drafted"] > stats["accepted"] > 0, stats  # drafts kept and rolled back


@pytest.mark.parametrize("flags", [["--draft-type", "suffix"], ["--num-draft-tokens", "8"],
                                   ["--draft-model", "x"], ["--no-gate"]])
def test_decoder_wedlm_refuses_drafter_flags_even_at_their_defaults(flags):
    """Issue #37: the wedlm decoder drafts itself, so any drafter flag given (even the
    default drafter, which was indistinguishable and silently ignored) is refused up front."""
    from specdec.cli import build_parser
    from specdec.config import RunConfig

    ns = build_parser().parse_args(["generate", "--decoder", "wedlm", *flags])
    with pytest.raises(ValueError, match=f"{flags[0].replace('no-', '')} not supported with --decoder "
                                         "wedlm: the wedlm decoder drafts itself.*--draft-type wedlm"):
        RunConfig.from_args(ns)


def test_drafter_flags_left_out_take_the_default_drafter():
    from specdec.cli import build_parser
    from specdec.config import RunConfig
    from specdec.drafters import DraftSpec

    for decoder in ("speculative", "wedlm"):
        cfg = RunConfig.from_args(build_parser().parse_args(["generate", "--decoder", decoder]))
        assert cfg.spec == DraftSpec() and cfg.draft_flags == ()
    cfg = RunConfig.from_args(build_parser().parse_args(["generate", "--no-gate", "--adaptive-k"]))
    assert cfg.spec == DraftSpec(gate=False, adaptive_k=True) and cfg.draft_flags == ("--gate", "--adaptive-k")
