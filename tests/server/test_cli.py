"""``specdec serve``'s flags and entry point (``specdec.server.cli``): the flags' defaults
are the config's, choices and repeatable flags parse as documented, and bad flags are
refused before a model loads or anything listens."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from specdec.server.cli import add_serve_parser, cmd_serve
from specdec.server.config import API_KEY_ENV, ServerConfig


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def test_the_flags_defaults_are_the_configs(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert ServerConfig.from_args(parse()) == ServerConfig()
    ns = parse()
    for f in dataclasses.fields(ServerConfig):
        if f.name not in ("speculation", "draft_flags", "more_api_keys", "model_alias",
                          "allowed_hosts"):
            assert getattr(ns, f.name) == f.default, f.name  # each own field has its flag


def test_repeatable_flags_and_choices():
    ns = parse("--api-key", "a", "--api-key", "b", "--model-alias", "x", "--model-alias", "y*",
               "--allowed-hosts", "h", "-m", "5", "--tool-call-parser", "hermes")
    assert (ns.api_key, ns.model_alias, ns.allowed_hosts) == (["a", "b"], ["x", "y*"], ["h"])
    assert (ns.max_tokens, ns.tool_call_parser) == (5, "hermes")
    for bad in (("--tool-call-parser", "xml"), ("--kv-bits", "5"), ("--log-level", "loud"),
                ("--port", "http")):
        with pytest.raises(SystemExit):
            parse(*bad)


def test_bad_flags_are_refused_before_anything_loads():
    with pytest.raises(ValueError, match="--queue-size must be >= 1"):
        cmd_serve(parse("--queue-size", "0", "--model", "/nonexistent/model"))
