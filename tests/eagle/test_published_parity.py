"""A published-format EAGLE-3 head keeps parity (#47 Done-when): the fixture written with the
EAGLE repo's key names and torch shapes (``test_io.published_arrays``, fp16 on disk, no
embeddings: the target's are shared) is loaded as the CLI and the server load it
(``DraftSpec("eagle", draft_model=DIR)`` -> ``prepare_resources`` -> ``build_drafter``) and
drafts on a tiny llama target: greedy for every k 1..8, seeded sampling, EAGLE-2 trees (8
nodes verified) greedy and seeded; the SpecForge / vLLM ``layers.0.*`` layout of the same
weights drafts the same tokens."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from specdec.core.sampling import SamplingParams
from specdec.core.stats import SpecStats
from specdec.drafters.spec import DraftSpec, build_drafter
from specdec.engine import token_stream
from specdec.resources import prepare_resources

from .conftest import tiny_target
from .test_io import published_arrays, write_eagle_repo_layout, write_layers0_layout

PROMPT = [5, 9, 17, 3, 5, 9, 17, 3, 5, 11, 12, 13]


@pytest.fixture(scope="module")
def head_dirs(tmp_path_factory):
    """The same weights in both published layouts (the EAGLE repo's ``midlayer.*``, and
    ``layers.0.*`` with its own copy of the embeddings)."""
    root, arrays = tmp_path_factory.mktemp("published"), published_arrays()
    write_eagle_repo_layout(root / "eagle", arrays)
    write_layers0_layout(root / "specforge", arrays, np.array(tiny_target("llama").model.embed_tokens.weight))
    return {"eagle": str(root / "eagle"), "specforge": str(root / "specforge")}


@functools.lru_cache(maxsize=None)
def plain(seed: int | None, arch: str = "llama") -> list[int]:
    target = tiny_target(arch)
    return [e.token for e in token_stream(target, PROMPT, max_tokens=16, sampling=sampling(seed))]


def sampling(seed: int | None) -> SamplingParams:
    return SamplingParams() if seed is None else SamplingParams(temperature=0.9, seed=seed)


def decode(head_dir: str, seed: int | None, k: int, tree_budget: int = 0, arch: str = "llama"):
    """Tokens, stats and step log of one request drafting with the head at ``head_dir``."""
    target = tiny_target(arch)
    spec = DraftSpec("eagle", draft_model=head_dir, gate=False)
    drafter = build_drafter(spec, prepare_resources(spec, target, None),
                            temperature=0.0 if seed is None else 0.9, seed=seed)
    stats, log = SpecStats(), []
    out = [e.token for e in token_stream(target, PROMPT, drafter=drafter, max_tokens=16, num_draft_tokens=k,
                                         sampling=sampling(seed), stats=stats, step_log=log,
                                         tree_budget=tree_budget)]
    return out, stats, log


def test_greedy_parity_for_every_k(head_dirs):
    for k in range(1, 9):
        out, stats, _ = decode(head_dirs["eagle"], None, k)
        assert out == plain(None), f"k={k}"
        assert stats.drafted > 0


def test_seeded_sampling_parity(head_dirs):
    for seed, k in ((3, 1), (4, 4), (5, 8)):
        out, stats, _ = decode(head_dirs["eagle"], seed, k)
        assert out == plain(seed), f"seed={seed} k={k}"
        assert stats.drafted > 0


@pytest.mark.parametrize("seed", [None, 7], ids=["greedy", "seeded"])
def test_trees_from_the_published_head_keep_parity(head_dirs, seed):
    out, _, log = decode(head_dirs["eagle"], seed, 3, tree_budget=8)
    assert out == plain(seed) and any(block == 9 for block, _ in log)  # 8-node trees verified


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_the_head_keeps_parity_on_qwen_targets(head_dirs, arch):
    """The same published head on a tiny Qwen2 and Qwen3 target (the target's embeddings and
    features; the head's layer stays the llama one its config names): greedy, seeded, trees."""
    for seed, k, budget in ((None, 8, 0), (3, 4, 0), (7, 3, 8)):
        out, stats, _ = decode(head_dirs["eagle"], seed, k, budget, arch)
        assert out == plain(seed, arch) and stats.drafted > 0, (seed, k, budget)


def test_the_layers0_layout_drafts_as_the_eagle_repos(head_dirs):
    a, b = (decode(head_dirs[name], None, 4) for name in ("eagle", "specforge"))
    assert a[0] == b[0] == plain(None)
    assert a[2] == b[2] and a[1].drafted == b[1].drafted  # the same drafts, step by step
