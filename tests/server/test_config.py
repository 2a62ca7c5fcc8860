"""``specdec serve``'s settings (``specdec.server.config``): flags reach the config, each
refusal names the flag to change, API keys from flags, the environment and a file, model
aliases, the Host allow-list, and ``--decoder wedlm`` giving ``specdec generate``'s
settings."""

from __future__ import annotations

import argparse

import pytest

from specdec.core.wedlm import WedlmSettings
from specdec.server.cli import add_serve_parser
from specdec.server.config import API_KEY_ENV, ServerConfig


def _serve_config(*argv: str):
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    return ServerConfig.from_args(parser.parse_args(["serve", *argv]))


def test_serve_flags_reach_the_config():
    cfg = _serve_config("--draft-type", "model", "--draft-model", "smollm2-135m")
    assert cfg.speculation.uses("model") and cfg.speculation.draft_model == "smollm2-135m"
    cfg = _serve_config("--api-key", "a", "--api-key", "b", "--model-alias", "claude-*")
    assert cfg.keys() == ("a", "b") and cfg.serves("claude-sonnet-4") and not cfg.serves("gpt-4")
    assert _serve_config().keys() == ()
    # --body-timeout: the flag's default is the middleware's, and a value given reaches the config
    assert _serve_config().body_timeout == ServerConfig().body_timeout == 30.0
    assert _serve_config("--body-timeout", "2").body_timeout == 2.0


@pytest.mark.parametrize("flags,message", [
    (("--top-p", "0.9"), "--top-p"), (("--draft-type", "ngram"), "--draft-type"),
    # serve's own default drafter, given (issue #37: it was silently ignored)
    (("--draft-type", "grammar,suffix"), "--draft-type not supported with --decoder wedlm: the "
     "wedlm decoder drafts itself.*--draft-type wedlm"),
    (("--num-draft-tokens", "8"), "--num-draft-tokens"), (("--wedlm-window", "0"), "--wedlm-window")])
def test_serve_decoder_wedlm_flags_are_checked(flags, message):
    p = argparse.ArgumentParser()
    add_serve_parser(p.add_subparsers())
    ns = p.parse_args(["serve", "--decoder", "wedlm", *flags])
    with pytest.raises(ValueError, match=message):
        ServerConfig.from_args(ns)


def test_serve_decoder_wedlm_config_gives_the_generate_settings():
    cfg = ServerConfig(decoder="wedlm", wedlm_window=4, entropy_threshold=2.0)
    cfg.validate()  # serve's default drafter does not count against --decoder wedlm
    assert cfg.run_config().wedlm_settings(270) == WedlmSettings(270, 4, 2.0, 0.01)


@pytest.mark.parametrize("flags, message", [
    (("--port", "0"), "--port must be in 1..65535"),
    (("--max-tokens", "0"), "--max-tokens must be >= 1"),
    (("--queue-size", "0"), "--queue-size must be >= 1"),
    (("--max-body-bytes", "1000"), "--max-body-bytes must be >= 1024"),
    (("--kv-budget", "1000"), "--kv-budget must be >= 1 MiB"),
    (("--drain-timeout", "4000"), "--drain-timeout must be in"),
    (("--body-timeout", "0"), "--body-timeout must be in"),
    (("--context-length", "1"), "--context-length must be >= 2"),
    (("--temp", "3"), "--temp must be <= 2"),
    (("--api-key", " k"), "--api-key must be non-empty without surrounding spaces"),
    (("--api-keys-file", "/nonexistent/keys"), "no such file"),
    (("--draft-type", "model"), "--draft-type model needs --draft-model"),
    (("--num-draft-tokens", "10000"), "--num-draft-tokens must be <="),
    (("--ngram-mod-file", "t.bin"), "use that instead of --ngram-mod-file"),
    (("--kv-bits", "4"), "not lossless under speculation.*add --draft-type none"),
])
def test_each_refusal_names_the_flag(flags, message):
    with pytest.raises(ValueError, match=message):
        _serve_config(*flags)


def test_keys_from_the_environment_and_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "env-key")
    assert _serve_config().keys() == ("env-key",)
    assert _serve_config("--api-key", "flag").keys() == ("flag",)  # a flag wins
    monkeypatch.delenv(API_KEY_ENV)
    keys = tmp_path / "keys"
    keys.write_text("# tenants\nk1\n\n  k2  \nk1\n")
    assert _serve_config("--api-key", "k0", "--api-keys-file", str(keys)).keys() == ("k0", "k1", "k2")
    keys.write_text("# no key yet\n")
    with pytest.raises(ValueError, match="holds no key"):
        _serve_config("--api-keys-file", str(keys))


def test_the_served_names_and_the_host_allow_list():
    cfg = _serve_config("--served-model-name", "mine", "--allowed-hosts", "box.lan")
    assert cfg.model_id == "mine" and cfg.serves("mine") and not cfg.serves("smollm2-135m")
    assert "localhost" in cfg.host_allowlist() and "box.lan" in cfg.host_allowlist()
    assert _serve_config("--host", "0.0.0.0").host_allowlist() is None  # any Host header
    assert _serve_config("--host", "0.0.0.0", "--allowed-hosts", "a").host_allowlist() == ("a",)
    assert _serve_config("--queue-size", "4", "--max-batch", "2").max_in_flight() == 4 + 2 + 64
