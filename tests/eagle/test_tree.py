"""eagle.tree: EAGLE-2's dynamic token tree from a head's top-k, verified by the tree path.
The tree is valid (parents first, depth <= k, size <= budget, nothing below an EOS) and its
first branch is the head's linear greedy draft; the head's real cache gains the fed rows
only; with trees forced on, output is plain decoding's (greedy and seeded sampling); an
accepted branch reaches the head's cache as the linear block of that path would have."""

from __future__ import annotations

import mlx.core as mx
import pytest
from .conftest import tiny_head, tiny_target
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.core.proposal import Proposal
from specdec.core.sampling import SamplingParams
from specdec.core.stats import SpecStats
from specdec.drafters.chain import ChainDrafter
from specdec.core.trees import first_branch, tree_positions
from specdec.drafters.eagle import EagleDrafter
from specdec.drafters.suffix import SuffixDrafter
from specdec.drafters.trie import merge_trees
from specdec.eagle.capture import capture_layers
from specdec.eagle.tree import TreeShape, tree_draft
from specdec.engine import token_stream

PROMPT = [5, 9, 17, 3, 5, 9, 17, 3, 5, 11, 12, 13]


def fed_features(target, head, context):
    """(features (1, n, 3H), tokens (1, n)) of one forward over ``context``: what the head is
    fed when every position reaches it at once."""
    with capture_layers(target, head.config.aux_layer_ids) as cap:
        target(mx.array([context[:-1]]), cache=None)
    return cap.fused_input(), mx.array([context[1:]])


@settings(max_examples=examples(12), deadline=None, database=None)
@given(prompt=st.lists(st.integers(0, 95), min_size=2, max_size=10), k=st.integers(1, 5),
       budget=st.integers(1, 14), topk=st.integers(1, 4), eos=st.sampled_from([None, 0, 2, 4]),
       layer=st.sampled_from(["llama", "qwen3"]))
def test_the_tree_is_valid_and_holds_the_linear_greedy_draft(prompt, k, budget, topk, eos, layer):
    target = tiny_target()
    head = tiny_head(target, layer)
    feats, follows = fed_features(target, head, prompt)
    stops = frozenset() if eos is None else frozenset({eos})
    tree_cache, line_cache = head.make_cache(), head.make_cache()
    tree = tree_draft(head, tree_cache, feats, follows, k, budget, TreeShape(topk), stops)
    line = head.draft(line_cache, feats, follows, k).tokens
    if eos in line:
        line = line[:line.index(eos) + 1]
    parents = tree.parent_ids
    assert 1 <= len(tree) <= budget and max(tree_positions(parents)) <= k  # Proposal: parents first
    assert list(first_branch(tree).tokens) == line[:budget]
    assert all(p < 0 or tree.tokens[p] not in stops for p in parents)  # nothing below an EOS
    for node in range(-1, len(tree)):  # siblings distinct: each a different guess
        kids = [tree.tokens[j] for j, p in enumerate(parents) if p == node]
        assert len(kids) == len(set(kids))
    assert tree_cache[0].offset == line_cache[0].offset == len(prompt) - 1  # the fed rows only
    n = len(prompt) - 1
    assert mx.array_equal(tree_cache[0].keys[..., :n, :], line_cache[0].keys[..., :n, :])


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.9, seed=7)],
                         ids=["greedy", "seeded"])
def test_trees_from_the_head_keep_parity(sampling):
    target = tiny_target()
    head = tiny_head(target)
    plain = [e.token for e in token_stream(target, PROMPT, max_tokens=16, sampling=sampling)]
    for chained in (False, True):  # alone, and first in a chain whose tries merge with suffix's
        eagle = EagleDrafter(head)
        drafter = ChainDrafter([eagle, SuffixDrafter()]) if chained else eagle
        log: list[tuple[int, int]] = []
        out = [e.token for e in token_stream(target, PROMPT, drafter=drafter, max_tokens=16,
                                             num_draft_tokens=3, sampling=sampling, step_log=log,
                                             tree_budget=8)]
        assert out == plain and any(block == 9 for block, _ in log)  # 8-node trees were verified
        eagle.propose(PROMPT + out, 1)
        assert eagle.fed == len(PROMPT + out) - 1  # one head row per committed position


class TruthBranchEagle(EagleDrafter):
    """The head's tree with the plain continuation grafted on as a later branch, so steps
    accept a path that is not the tree's first branch."""

    def __init__(self, head, truth):
        super().__init__(head)
        self.truth = truth

    def propose_tree(self, context, k, budget):
        tree = super().propose_tree(context, k, budget - 2)
        true = self.truth[len(context) - len(PROMPT):][:2]
        return merge_trees([tree, Proposal(true)], budget) if tree and true else tree


def test_an_accepted_branch_reaches_the_head_as_its_linear_block_would():
    target = tiny_target()
    head = tiny_head(target)
    plain = [e.token for e in token_stream(target, PROMPT, max_tokens=12)]
    drafter, stats = TruthBranchEagle(head, plain), SpecStats()
    out = [e.token for e in token_stream(target, PROMPT, drafter=drafter, max_tokens=12, num_draft_tokens=3,
                                         stats=stats, tree_budget=6)]
    assert out == plain and stats.accepted_by_position[1] >= 2  # grafted branches accepted
    context = PROMPT + out
    drafter.propose(context, 1)  # the last step's rows join the head's cache
    n = len(context) - 1
    assert drafter.fed == n
    oracle = head.make_cache()  # every position's features from one forward, fed at once
    mx.eval(head.feed(oracle, *fed_features(target, head, context)))
    got, want = drafter._cache[0], oracle[0]
    assert mx.allclose(got.keys[..., :n, :], want.keys[..., :n, :], atol=1e-4).item()
    assert mx.allclose(got.values[..., :n, :], want.values[..., :n, :], atol=1e-4).item()
