"""One draft spec, one drafter base: every front end parses drafters the same way, the
engine drives every drafter through the same three calls, and a tree proposal is
refused rather than flattened."""

from __future__ import annotations

import argparse

import pytest
from conftest import cached_tiny, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.bench.configs import parse_config
from specdec.config import RunConfig, add_draft_flags, draft_spec_from_args
from specdec.drafters import (DRAFT_TYPES, Drafter, DraftResources, DraftSpec, NgramDrafter,
                              NoDrafter, Proposal, build_drafter)
from specdec.policy.adaptive import AdaptiveK
from specdec.drafters.chain import ChainDrafter
from specdec.policy.build import build_policy
from specdec.policy.drafting import DecodePolicy
from specdec.policy.gate import CostGate
from specdec.engine import token_stream
from specdec.server.engine.speculative import SpeculativeOptions, merge_speculative

# ---------------------------------------------------------------- DraftSpec parsing

names = st.sampled_from([t for t in DRAFT_TYPES if t != "none"])


@given(st.lists(names, min_size=1, max_size=4, unique=True), st.integers(1, 16),
       st.integers(1, 4), st.booleans(), st.booleans())
def test_every_front_end_builds_the_same_spec(chain, k, n, gate, adaptive):
    """The CLI flags, the server's ``speculative`` field and the bench's config string
    describe one drafter; each must parse to the same DraftSpec."""
    text = ",".join(chain)
    lib = DraftSpec(text, num_draft_tokens=k, ngram_min=n, ngram_max=max(3, n), gate=gate,
                    adaptive_k=adaptive)
    parser = argparse.ArgumentParser()
    add_draft_flags(parser)
    argv = ["--draft-type", text, "--num-draft-tokens", str(k), "--ngram-min", str(n),
            "--ngram-max", str(max(3, n))] + ["--no-gate"] * (not gate) + ["--adaptive-k"] * adaptive
    assert draft_spec_from_args(parser.parse_args(argv)) == lib
    opts = SpeculativeOptions(draft_type=text, num_draft_tokens=k, ngram_min=n,
                              ngram_max=max(3, n), gate=gate, adaptive_k=adaptive)
    assert merge_speculative(DraftSpec("suffix"), opts) == lib
    bench = f"{text}:k={k}" + (f":n={n}" if n != 1 else "") + ":nogate" * (not gate) + ":adaptive" * adaptive
    assert parse_config(bench).spec == lib
    assert parse_config(parse_config(bench).text) == parse_config(bench)


@pytest.mark.parametrize("bad, message", [
    ("ngram,none", "'none' cannot be part of a chain"),
    ("ngrams", "use one of"),
    ("ngram,,suffix", "use one of"),
    ("ngram,ngram", "names each drafter once"),
])
def test_bad_draft_types_are_refused_everywhere(bad, message):
    with pytest.raises(ValueError, match=message):
        DraftSpec(bad)
    with pytest.raises(ValueError, match=message):
        parse_config(f"{bad}:k=4")
    with pytest.raises(ValueError):
        SpeculativeOptions(draft_type=bad)


@pytest.mark.parametrize("kw, message", [
    (dict(num_draft_tokens=0), "--num-draft-tokens"),
    (dict(ngram_min=3, ngram_max=2), "--ngram-max"),
    (dict(ngram_mod_size=0), "--ngram-mod-size"),
    (dict(suffix_history=-1), "--suffix-history"),
])
def test_spec_validates_its_numbers(kw, message):
    with pytest.raises(ValueError, match=message):
        DraftSpec("ngram", **kw)


def test_one_tree_budget_parser_behind_every_front_end():
    from specdec.drafters import parse_tree_budget
    from specdec.measure import resolve_tree_budget

    assert [parse_tree_budget(v) for v in (0, 12, "12", "auto")] == [0, 12, 12, "auto"]
    for bad in (-1, "-1", "x", "", "1.5", "²", True, 2.0, None):
        with pytest.raises(ValueError, match="integer >= 0 or 'auto'"):
            parse_tree_budget(bad)
    with pytest.raises(ValueError, match="'12'"):  # a typed value is parsed already
        parse_tree_budget("12", text=False)
    # the same rule at each front end (the server adds its own cap)
    assert parse_config("suffix:tree=12").tree_budget == 12
    assert SpeculativeOptions(draft_tree_budget=12).draft_tree_budget == 12
    with pytest.raises(ValueError, match="draft_tree_budget must be in"):
        SpeculativeOptions(draft_tree_budget=-1)
    assert resolve_tree_budget(None, 5) == (5, None)


def test_bounds_are_checked_once_by_the_spec():
    """The server and the bench leave k and the n-gram bounds to ``DraftSpec``: the same
    rule and the same message (naming the request field or the bench option)."""
    for kw in (dict(num_draft_tokens=0), dict(ngram_min=0)):
        opts = SpeculativeOptions(**kw)  # only JSON types and the server's caps here
        field = next(iter(kw))
        with pytest.raises(ValueError, match=rf"speculative\.{field}"):
            merge_speculative(DraftSpec("suffix"), opts)
    with pytest.raises(ValueError, match="--num-draft-tokens must be an integer >= 1"):
        parse_config("ngram:k=0")


def test_the_server_names_request_fields_in_its_errors():
    with pytest.raises(ValueError, match=r"speculative\.ngram_max"):
        merge_speculative(DraftSpec("suffix"), SpeculativeOptions(ngram_min=5, ngram_max=4))


def test_unused_drafter_options_are_refused_at_the_cli():
    for spec, flag in ((DraftSpec("ngram", draft_model="x"), "--draft-model"),
                       (DraftSpec("ngram", ngram_mod_n=3), "--ngram-mod-n"),
                       (DraftSpec("ngram", suffix_history=5), "--suffix-history")):
        with pytest.raises(ValueError, match=flag):
            RunConfig(spec=spec).validate()
    with pytest.raises(ValueError, match="needs --draft-model"):
        RunConfig(spec=DraftSpec("model")).validate()


# ---------------------------------------------------------------- build_drafter


def test_build_drafter_builds_what_the_spec_says(smollm):
    _, tok = smollm
    assert isinstance(build_drafter(DraftSpec("none")), NoDrafter)
    d = build_drafter(DraftSpec("ngram", ngram_min=2, ngram_max=4, gate=False), DraftResources(tokenizer=tok))
    assert isinstance(d, NgramDrafter) and (d.n_min, d.n_max) == (2, 4)
    assert d.eos == frozenset(tok.eos_token_ids)
    chain = build_drafter(DraftSpec("suffix,ngram-mod", ngram_mod_size=1024, ngram_mod_n=2, gate=False),
                          DraftResources(tokenizer=tok))
    assert isinstance(chain, ChainDrafter) and chain.name == "suffix,ngram-mod"
    table = chain.drafters[1].table
    assert (table.size, table.n) == (1024, 2)
    cost = {L: 1.0 + 0.1 * L for L in range(1, 10)}
    # the drafter is bare; its policy (the cost gate, the default) is built beside it
    assert type(build_drafter(DraftSpec("ngram"), DraftResources(tokenizer=tok))) is NgramDrafter
    gated = build_policy(DraftSpec("ngram", num_draft_tokens=8, adaptive_k=True),
                         DraftResources(tokenizer=tok, cost=cost))
    # the gate (the default) picks each step's k itself: it is adaptive k, and more
    assert isinstance(gated, CostGate) and isinstance(gated.drafter, NgramDrafter)
    assert gated.name == "ngram" and gated.k_max == 8
    adaptive = build_policy(DraftSpec("ngram", gate=False, adaptive_k=True), DraftResources(tokenizer=tok, cost=cost))
    assert type(adaptive) is AdaptiveK
    assert type(build_policy(DraftSpec("ngram", gate=False), DraftResources(tokenizer=tok))) is DecodePolicy
    for spec in (DraftSpec("ngram"), DraftSpec("ngram", gate=False, adaptive_k=True)):
        with pytest.raises(ValueError, match="verify cost curve: build the drafter with specdec.prepare_resources"):
            build_policy(spec, DraftResources(tokenizer=tok))
    with pytest.raises(ValueError, match="draft model"):
        build_drafter(DraftSpec("model"), DraftResources(tokenizer=tok))


def test_ngram_mod_file_shape_must_match_the_flags(tmp_path, smollm):
    from specdec.drafters import ngram_mod_table

    _, tok = smollm
    path = str(tmp_path / "t.ngm")
    ngram_mod_table(DraftSpec("ngram-mod", ngram_mod_size=512), tok).save(path)
    loaded = ngram_mod_table(DraftSpec("ngram-mod", ngram_mod_file=path), tok)
    assert loaded.size == 512
    from specdec.resources import drafter_for  # the library path loads the file too

    assert drafter_for(DraftSpec("ngram-mod", ngram_mod_file=path, gate=False), None, tok).drafter.table.size == 512
    with pytest.raises(ValueError, match="size 512"):
        ngram_mod_table(DraftSpec("ngram-mod", ngram_mod_file=path, ngram_mod_size=1024), tok)


# ---------------------------------------------------------------- the drafter base and the engine


class Recorder(Drafter):
    """Proposes the token that followed the last one earlier on (a tiny prompt lookup) and
    records every call the engine makes."""

    name = "recorder"

    def __init__(self):
        self.calls: list[tuple] = []

    def begin(self, prompt_ids):
        self.calls.append(("begin", len(prompt_ids)))

    def propose(self, context, k):
        self.calls.append(("propose", len(context)))
        last = context[-1]
        for i in range(len(context) - 2, -1, -1):
            if context[i] == last:
                return Proposal(context[i + 1 : i + 1 + k])
        return Proposal()

    def observe(self, n):
        self.calls.append(("observe", n))


@settings(max_examples=examples(15), deadline=None)
@given(st.lists(st.integers(0, 7), min_size=2, max_size=12), st.integers(1, 5))
def test_engine_calls_begin_once_then_propose_and_observe(prompt_tail, k):
    model = cached_tiny("llama")
    prompt = [3, 4, 5, 3, 4] + prompt_tail
    d = Recorder()
    for _ in range(2):  # two requests through one drafter
        d.calls.clear()
        out = [e.token for e in token_stream(model, prompt, drafter=d, max_tokens=12, num_draft_tokens=k)]
        assert d.calls[0] == ("begin", len(prompt))
        assert all(c[0] != "begin" for c in d.calls[1:])
        # every non-empty proposal is observed right after it, an empty one never is
        for i, c in enumerate(d.calls[1:-1], start=1):
            if c[0] == "observe":
                assert d.calls[i - 1][0] == "propose"
        contexts = [n for name, n in d.calls if name == "propose"]
        assert contexts == sorted(contexts) and contexts[0] == len(prompt)
        assert out == [e.token for e in token_stream(model, prompt, max_tokens=12)]


class TreeDrafter(Drafter):
    name = "tree"

    def propose(self, context, k):
        return Proposal([1, 2], parents=(-1, -1))


class ListDrafter(Drafter):
    name = "list"

    def propose(self, context, k):
        return [1, 2]


def test_engine_refuses_trees_and_untyped_proposals():
    model = cached_tiny("llama")
    with pytest.raises(ValueError, match="token tree"):
        list(token_stream(model, [1, 2, 3], drafter=TreeDrafter(), max_tokens=4))
    with pytest.raises(TypeError, match="Proposal"):
        list(token_stream(model, [1, 2, 3], drafter=ListDrafter(), max_tokens=4))


def test_the_drafter_interface_is_declared():
    """``Drafter`` is abstract in ``propose``; its capabilities are class attributes every
    drafter states, and wrappers state what they wrap."""
    with pytest.raises(TypeError, match="abstract"):
        Drafter()

    class NoPropose(Drafter):
        name = "half"

    with pytest.raises(TypeError, match="propose"):
        NoPropose()
    cost = {L: 1.0 + 0.1 * L for L in range(1, 10)}
    from specdec.drafters.ngram_mod import NgramModTable

    res = DraftResources(cost=cost, table=NgramModTable(), draft_cost={"fixed": 1e-5, "per_token": 0.0})
    branches = {"none": False, "ngram": True, "ngram-mod": False, "suffix": True, "grammar": False}
    for name, want in branches.items():
        d = build_drafter(DraftSpec(name), res)
        assert d.branches is want and d.draft_cost == (res.draft_cost if name != "none" else None)
        for wrapped in (dict(gate=False), dict(gate=False, adaptive_k=True), dict(adaptive_k=True)):
            if name != "none":
                assert build_policy(DraftSpec(name, **wrapped), res).drafter.branches is want
    assert build_drafter(DraftSpec("ngram-mod,grammar"), res).branches  # merged: a trie
    assert not NgramDrafter(max_matches=1).branches
    from specdec.drafters.draft_model import DraftModelDrafter

    model = cached_tiny("llama")  # greedy alternatives branch; sampled drafts stay chains
    assert DraftModelDrafter(model).branches and not DraftModelDrafter(model, temperature=0.5).branches
    assert not DraftModelDrafter(model, branch_depths=0).branches
    ngram, costly = NgramDrafter(), NgramDrafter()
    ngram.draft_cost, costly.draft_cost = {"fixed": 1.0, "per_token": 0.0}, {"fixed": 2.0, "per_token": 0.5}
    assert ChainDrafter([ngram, costly]).draft_cost == {"fixed": 3.0, "per_token": 0.5}
    assert ChainDrafter([ngram, NgramDrafter()]).draft_cost is None  # one member unknown
    assert CostGate(costly, cost, 4).draft_cost == AdaptiveK(costly, cost, 4).draft_cost == costly.draft_cost


def test_generate_refuses_objects_that_are_not_drafters(smollm):
    from specdec import generate

    class Duck:
        name = "duck"

        def propose(self, context, k):
            return []

        def observe(self, n):
            pass

    with pytest.raises(TypeError, match="subclass specdec.drafters.Drafter"):
        generate(*smollm, "hi", drafter=Duck(), max_tokens=2)
