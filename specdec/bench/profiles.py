"""Named benchmark profiles: the default sweep, ``quick`` (CI smoke test), and profiles
that follow the designs of published experiments (``rag3``, ``multiturn`` and
``warmstart`` have not been run in full yet: see the README).

Contract: ``PROFILES[name]`` is a ``Profile`` whose fields are the defaults of a
``BenchPlan``; command-line flags override any of them. ``warm_from`` marks the
cross-model warm-start experiment: before measuring, ``build_warm_table`` serves the
profile's workloads (all turns) on that model with one shared ngram-mod table and saves
it, and the ``warm`` configs of the measured model start from that file.
Tests: tests/bench/test_profiles.py, tests/bench/test_report.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..drafters.ngram_mod import NgramModDrafter, NgramModTable, tokenizer_fingerprint
from ..loader import load

ECHO_SET = ("code_hints", "passage_json", "json_add", "multiturn_short", "summarize_zen")


@dataclass(frozen=True)
class Profile:
    description: str
    model: str = "smollm2-135m"
    workloads: tuple[str, ...] = ()  # names of built-in workloads; () = all of them
    configs: tuple[str, ...] = ("ngram:k=4",)
    prompt_tokens: tuple[int | None, ...] = (None,)
    runs: int = 3
    max_tokens: int = 128
    peers: tuple[str, ...] = ()
    peer_k: tuple[int, ...] = (4,)  # the peers' speculative runs: one per k
    draft_model: str | None = None
    warm_from: str | None = None
    questions: str = ""  # "specbench": the workloads are Spec-Bench's questions, not built-ins
    quick_per_category: int = 0  # --quick: this many questions per category (stratified)
    oracle: bool = True  # the oracle drafter's runs (--no-oracle turns them off)


PROFILES: dict[str, Profile] = {
    "default": Profile(
        "every class at two prompt lengths; ngram at k=4 and 8, suffix, ngram-mod (all "
        "gated, the default), ngram without the gate, token trees beside their linear configs, "
        "the oracle; all peers (the README's run)",
        workloads=(*ECHO_SET, "open_story"),
        configs=("ngram:k=4", "ngram:k=8", "suffix:k=4", "ngram-mod:k=4", "ngram:k=4:nogate",
                 "ngram:k=4:tree=16", "suffix:k=4:tree=auto"),
        prompt_tokens=(300, 600), runs=3, max_tokens=64,
        peers=("hf-transformers", "llama.cpp", "mlx-lm")),
    "quick": Profile(
        "CI smoke test (about 8 min on 2 cores, 4 with --no-warmup): four classes, ngram "
        "and suffix at k=4, an auto-sized ngram tree, the oracle",
        workloads=("code_hints", "passage_json", "json_add", "open_story"),
        configs=("ngram:k=4", "suffix:k=4", "ngram:k=4:tree=auto"), runs=1, max_tokens=40),
    "specbench": Profile(
        "Spec-Bench's 480 questions (github hemingkx/Spec-Bench, vendored): its six "
        "categories, MT-bench's second turn after the model's own first answer, 128 tokens a "
        "turn, greedy; plain, the default (suffix k<=8, gated) and suffix k=8 ungated, "
        "interleaved, 3 runs; per-category speedup and tokens per forward beside the "
        "leaderboard. --quick: 2 questions per category (--per-category N)",
        questions="specbench", quick_per_category=2,
        configs=("suffix:k=8", "suffix:k=8:nogate"), runs=3, max_tokens=128, oracle=False),
    "rag3": Profile(
        "the design of the published three-class RAG bench: passage / code / json_rag at 800 prompt "
        "tokens, k=2 with n_min 2 and 3, and at k=8",
        workloads=("passage_json", "code_hints", "json_lookup"),
        configs=("ngram:k=2:n=2", "ngram:k=2:n=3", "ngram:k=8:n=2", "ngram:k=8:n=3"),
        prompt_tokens=(800,), runs=3, max_tokens=128),
    "multiturn": Profile(
        "short and long multi-turn editing: ngram vs ngram-mod, per turn",
        workloads=("multiturn_short", "multiturn_long"),
        configs=("ngram:k=4", "ngram:k=6", "ngram-mod:k=4", "ngram-mod:k=6"),
        runs=3, max_tokens=128),
    "agents": Profile(
        "agent traffic on Qwen2.5-Coder-0.5B: tool calls forced by tool_choice whose arguments "
        "quote a tool's result (a whole file through write_file, a record through "
        "update_record) and a record extracted under a JSON schema; the grammar drafter "
        "chained before suffix and ngram, each alone, and plain under the same constraint",
        model="qwen2.5-coder-0.5b",
        workloads=("agent_write_file", "agent_update_record", "json_extract"),
        configs=("grammar,suffix:k=8", "suffix:k=8", "grammar:k=8"),
        runs=1, max_tokens=600),
    "pair": Profile(
        "two-model speculation, Qwen2.5-Coder 0.5B drafting for 1.5B, beside mlx-lm's own "
        "draft-model loop at the same k (2, 3, 4, 6, 8) in the same run; draft-model trees and "
        "the ngram,model chain; a code edit and a JSON edit, 128 tokens (the README's pair "
        "table). About 2 h on the 2-core CPU (1.5B plain ~1.1 tok/s, ~20 s prefill a run): "
        "~30 min per case and repetition (plain, 8 draft-model configs, the oracle at 5 k, "
        "mlx-lm plain + 5 k) x 2 cases x (1 warm-up + 1 run); --no-warmup halves it (66 min "
        "measured), --no-oracle saves ~1/7",
        model="qwen2.5-coder-1.5b", draft_model="qwen2.5-coder-0.5b",
        workloads=("code_hints", "json_add"),
        configs=("model:k=2", "model:k=3", "model:k=4", "model:k=6", "model:k=8",
                 "model:k=4:tree=auto", "model:k=6:tree=8", "ngram,model:k=4"),
        runs=1, max_tokens=128,
        # mlx-lm only: the 1.5B in torch and llama.cpp beside it came close to 24 GiB
        peers=("mlx-lm",), peer_k=(2, 3, 4, 6, 8)),
    "distributed": Profile(
        "for --distributed (mlx.launch): the sharded Qwen2.5-Coder-0.5B, plain vs prompt "
        "lookup and suffix drafting, the cost curve of the sharded forward; no peers",
        model="qwen2.5-coder-0.5b", workloads=("code_hints", "json_add", "open_story"),
        configs=("ngram:k=4", "ngram:k=8", "suffix:k=4"), runs=1, max_tokens=64),
    "warmstart": Profile(
        "cross-model warm start: an ngram-mod table built serving the workloads on the "
        "0.5B, loaded by the 1.5B; acceptance per turn cold vs warm",
        model="qwen2.5-coder-1.5b", warm_from="qwen2.5-coder-0.5b",
        workloads=("multiturn_short",), configs=("ngram-mod:k=4", "ngram-mod:k=4:warm"),
        runs=1, max_tokens=64),
}


def build_warm_table(model_name: str, workloads: Sequence, max_tokens: int, path: Path,
                     dtype: str = "auto") -> dict:
    """Serve ``workloads`` on ``model_name`` with one shared ngram-mod table; save it to
    ``path``. Returns what was built (occupancy, tokens served)."""
    from .runner import conversation  # imports mlx: bench.cli imports this module at start-up

    model, tok = load(model_name, dtype=dtype)
    table = NgramModTable(tokenizer_fingerprint=tokenizer_fingerprint(tok))
    served = 0
    for w in workloads:
        drafter = NgramModDrafter(table, eos=tok.eos_token_ids)
        for _, res in conversation(model, tok, w, drafter, 4, w.max_tokens or max_tokens):
            served += len(res.tokens)  # each turn's whole text joined the table (its ``end``)
    table.save(path)
    return dict(model=model_name, file=str(path), occupancy=table.occupancy(),
                generated_tokens=served)
