"""drafters.mtp + eagle.mtp: a checkpoint's own MTP block, read from ``mtp.*`` weights written in
the published Qwen3-Next / Qwen3.5 layout (zero-centred norms, per-expert MoE weights), drafts
from the verify forward's last hidden state. Output is plain decoding's, greedy and seeded, for
k 1..8, on two hybrid (linear-attention + attention) targets: a MoE Qwen3-Next and a dense Qwen3.5
(mlx-lm's Qwen3.5 needs a linear-attention layer: an all-attention one does not run there), and on
a dense attention-only MiMo (``model.mtp_layers.*``, hidden state first)."""

from __future__ import annotations

import functools
import importlib
import json

import mlx.core as mx
import pytest
from hybrid_tiny import CONFIGS, VOCAB
from mlx.utils import tree_flatten, tree_map, tree_map_with_path

from specdec.core.sampling import SamplingParams
from specdec.core.stats import SpecStats
from specdec.decode.generation import Generation
from specdec.drafters.base import EMPTY, Drafter, Proposal
from specdec.drafters.mtp import MtpDrafter
from specdec.drafters.spec import DraftSpec, build_drafter
from specdec.eagle.mtp import MtpFormatError, MtpHead, load_mtp
from specdec.engine import token_stream
from specdec.resources import prepare_resources

TARGETS = {  # a hybrid MoE target (Qwen3-Next's shape) and a hybrid dense-MLP Qwen3.5
    "hybrid": ("qwen3_next", dict(CONFIGS["qwen3_next"], num_experts=4, num_experts_per_tok=2,
                                  mlp_only_layers=[])),
    "dense": ("qwen3_5", dict(CONFIGS["qwen3_5"])),
    "mimo": ("mimo", dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
                          num_key_value_heads=2, rms_norm_eps=1e-5, num_nextn_predict_layers=1)),
    # DeepSeek-V3's shape: MLA attention, a dense first layer, MoE after (the MTP layer's too)
    "deepseek": ("deepseek_v3", dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                     n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
                                     kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16,
                                     qk_nope_head_dim=16, first_k_dense_replace=1, rms_norm_eps=1e-5,
                                     num_nextn_predict_layers=1)),
    # GLM-4.5 / 4.6's shape (glm4_moe): GQA with q/k norms, q/k/v biases and half-rope, a dense
    # first layer, MoE after; GLM-4.7-Flash's (glm4_moe_lite): MLA and MoE. MTP as layer n.
    "glm": ("glm4_moe", dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, head_dim=16,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                             topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                             first_k_dense_replace=1, rms_norm_eps=1e-5, rope_theta=10000.0,
                             rope_scaling=None, use_qk_norm=True, tie_word_embeddings=False,
                             attention_bias=True, partial_rotary_factor=0.5, max_position_embeddings=512,
                             num_nextn_predict_layers=1)),
    "glm_lite": ("glm4_moe_lite", dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                       n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
                                       kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16,
                                       qk_nope_head_dim=16, first_k_dense_replace=1, rms_norm_eps=1e-5,
                                       max_position_embeddings=512, num_nextn_predict_layers=1)),
}
AT_END = ("deepseek", "glm", "glm_lite")  # the MTP layer stored as layer n (``model.layers.2.*``)
PROMPT = [5, 9, 17, 3, 5, 9, 17, 3, 5]
# the published names (Qwen3-Next / Qwen3.5 checkpoints; vLLM's and SGLang's loaders read these)
DENSE_KEYS = {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
              "mtp.norm.weight", "mtp.layers.0.input_layernorm.weight",
              "mtp.layers.0.post_attention_layernorm.weight", "mtp.layers.0.self_attn.q_proj.weight",
              "mtp.layers.0.self_attn.k_proj.weight", "mtp.layers.0.self_attn.v_proj.weight",
              "mtp.layers.0.self_attn.o_proj.weight", "mtp.layers.0.self_attn.q_norm.weight",
              "mtp.layers.0.self_attn.k_norm.weight", "mtp.layers.0.mlp.gate_proj.weight",
              "mtp.layers.0.mlp.up_proj.weight", "mtp.layers.0.mlp.down_proj.weight"}


@functools.lru_cache(maxsize=None)
def target(name: str):
    arch, cfg = TARGETS[name]
    mod = importlib.import_module(f"mlx_lm.models.{arch}")
    model = mod.Model(mod.ModelArgs.from_dict(dict(cfg, model_type=arch, vocab_size=VOCAB)))
    mx.random.seed(0)
    model.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.5, model.parameters()))
    mx.eval(model.parameters())
    return model


def published(head: MtpHead, n_layers: int = 2) -> dict[str, mx.array]:
    """``head``'s weights as a checkpoint stores them: Qwen's ``mtp.``-prefixed names, norms
    zero-centred, experts one by one (``mlp.experts.{e}.{gate,up,down}_proj``); MiMo's
    ``model.mtp_layers.0.*`` with its own names of fc and the norms; DeepSeek-V3's and GLM's
    ``model.layers.{n}.*`` after the target's ``n_layers`` (the layer's keys bare, MLA's
    ``kv_b_proj`` whole, copies of the target's embeddings and LM head beside)."""
    lay = head.layout
    theirs = {ours: name for name, ours in lay.names.items()}
    mimo = lay.prefix == "model.mtp_layers."
    prefix = lay.prefix.format(n=n_layers)  # at-end: after the last
    out = {}
    for k, v in tree_flatten(head.parameters()):
        part, _, leaf = k.rpartition(".")
        key = f"{'0.' if mimo else ''}{theirs[part]}.{leaf}" if part in theirs else \
            k[len("layers.0."):] if lay.at_end else k[len("layers."):] if mimo else k
        if ".switch_mlp." in key:
            base, name = key.split(".switch_mlp.")
            out.update({f"{prefix}{base}.experts.{e}.{name}": v[e] for e in range(v.shape[0])})
        else:
            out[prefix + key] = v - 1.0 if lay.centred and key.endswith("norm.weight") else v
    attn = f"{prefix}self_attn."
    if attn + "embed_q.weight" in out:  # MLA: mlx-lm splits kv_b_proj (heads x (nope + v), kv_lora): join
        wk, wv = out.pop(attn + "embed_q.weight"), out.pop(attn + "unembed_out.weight")
        kv_b = mx.concatenate([wk.swapaxes(-1, -2), wv], axis=1)  # (heads, nope + v, kv_lora)
        out[attn + "kv_b_proj.weight"] = kv_b.reshape(-1, wk.shape[1])
    if lay.at_end:
        out[f"{prefix}embed_tokens.weight"] = head.shared.embed.weight
        out[f"{prefix}shared_head.head.weight"] = head.shared.head.weight
    return out


@functools.lru_cache(maxsize=None)
def checkpoint(name: str, tmp_root: str) -> str:
    """An original-checkpoint directory holding a random MTP block (and a config.json)."""
    model = target(name)
    mx.random.seed(7)
    head = MtpHead(model)
    head.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.5, head.parameters()))
    d = f"{tmp_root}/{name}"
    import os

    os.makedirs(d, exist_ok=True)
    mx.save_safetensors(f"{d}/model-00002-of-00002.safetensors", published(head))
    mx.save_safetensors(f"{d}/model-00001-of-00002.safetensors", {"model.embed_tokens.weight": mx.zeros((2, 2))})
    keys = list(published(head))
    wmap = {k: "model-00002-of-00002.safetensors" for k in keys}
    wmap["model.embed_tokens.weight"] = "model-00001-of-00002.safetensors"
    with open(f"{d}/model.safetensors.index.json", "w") as f:
        json.dump({"weight_map": wmap}, f)
    with open(f"{d}/config.json", "w") as f:
        json.dump(dict(TARGETS[name][1], model_type=TARGETS[name][0], mtp_num_hidden_layers=1), f)
    return d


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("mtp"))


@functools.lru_cache(maxsize=None)
def plain(name: str, seed: int | None):
    sp = SamplingParams(temperature=0.0 if seed is None else 0.8, seed=seed)
    return [e.token for e in token_stream(target(name), PROMPT, max_tokens=16, sampling=sp)]


def test_the_fixture_uses_the_published_names_and_loads_them(root):
    dense = json.load(open(f"{checkpoint('dense', root)}/model.safetensors.index.json"))["weight_map"]
    assert {k for k in dense if k.startswith("mtp.")} == DENSE_KEYS
    hybrid = json.load(open(f"{checkpoint('hybrid', root)}/model.safetensors.index.json"))["weight_map"]
    assert "mtp.layers.0.mlp.experts.3.down_proj.weight" in hybrid
    assert "mtp.layers.0.mlp.shared_expert_gate.weight" in hybrid
    mimo = json.load(open(f"{checkpoint('mimo', root)}/model.safetensors.index.json"))["weight_map"]
    assert {"model.mtp_layers.0.input_proj.weight", "model.mtp_layers.0.token_layernorm.weight",
            "model.mtp_layers.0.hidden_layernorm.weight", "model.mtp_layers.0.final_layernorm.weight",
            "model.mtp_layers.0.self_attn.q_proj.bias", "model.mtp_layers.0.mlp.down_proj.weight"} <= set(mimo)
    head = load_mtp(checkpoint("mimo", root), target("mimo"))
    stored = mx.load(f"{checkpoint('mimo', root)}/model-00002-of-00002.safetensors")
    assert mx.array_equal(head.norm.weight, stored["model.mtp_layers.0.final_layernorm.weight"])  # as is
    head = load_mtp(checkpoint("dense", root), target("dense"))
    stored = mx.load(f"{checkpoint('dense', root)}/model-00002-of-00002.safetensors")
    assert mx.allclose(head.norm.weight, stored["mtp.norm.weight"] + 1.0)  # un-centred
    assert mx.array_equal(head.fc.weight, stored["mtp.fc.weight"])
    moe = load_mtp(checkpoint("hybrid", root), target("hybrid")).layers[0].mlp.switch_mlp
    stored = mx.load(f"{checkpoint('hybrid', root)}/model-00002-of-00002.safetensors")
    assert mx.array_equal(moe.down_proj.weight[3], stored["mtp.layers.0.mlp.experts.3.down_proj.weight"])


ATTENTION_KEYS = {"deepseek": ("self_attn.kv_b_proj.weight",), "glm_lite": ("self_attn.kv_b_proj.weight",),
                  "glm": ("self_attn.q_proj.bias", "self_attn.q_norm.weight", "self_attn.k_norm.weight")}


@pytest.mark.parametrize("name", AT_END)
def test_an_at_end_layout_loads_and_drafts_by_vllms_maths(name, root):
    """``model.layers.{n}.*`` (vLLM's deepseek_mtp and glm4_moe_mtp names: DeepSeek-V3, GLM-4.5 /
    4.6, GLM-4.7-Flash) loads through mlx-lm's own sanitize (MLA's ``kv_b_proj`` split, experts
    stacked; the embedding and head copies left to the target's); drafts follow the published
    maths, checked against a cache-free oracle: the logits read ``shared_head.norm(h)``, the
    next draft reads ``h`` un-normed."""
    model = target(name)
    d = checkpoint(name, root)
    keys = set(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"])
    assert {f"model.layers.2.{k}" for k in (
        "eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight", "shared_head.head.weight",
        "embed_tokens.weight", "mlp.gate.e_score_correction_bias", "mlp.experts.3.down_proj.weight",
        "mlp.shared_experts.up_proj.weight", *ATTENTION_KEYS[name])} <= keys
    head = load_mtp(d, model)
    stored = mx.load(f"{d}/model-00002-of-00002.safetensors")
    assert mx.array_equal(head.norm.weight, stored["model.layers.2.shared_head.norm.weight"])


# what vLLM's MTP models zero at the sequence's position 0 (deepseek_mtp, glm4_moe_mtp: the token
# embedding; mimo_mtp: fc's output; qwen3_next_mtp: nothing)
VLLM_ZEROES = {"deepseek": "embed", "glm": "embed", "glm_lite": "embed", "mimo": "fc"}


@pytest.mark.parametrize("name", list(VLLM_ZEROES))
def test_drafts_follow_vllms_maths_from_position_0(name, root):
    """Against a cache-free oracle of vLLM's maths (the whole sequence again each step, position
    0 masked as vLLM masks it): the first draft's logits and the drafts. At-end blocks: the
    logits read ``shared_head.norm(h)``, the next draft reads ``h`` un-normed; MiMo: ``norm(h)``
    both, the hidden state first in the concatenation."""
    from specdec.eagle.capture import capture_layers

    model = target(name)
    head, n_layers = load_mtp(checkpoint(name, root), model), len(model.model.layers)
    with capture_layers(model, (n_layers,)) as cap:
        model(mx.array([PROMPT[:-1]]))
    hidden, toks = model.model.norm(cap.hidden[n_layers]), list(PROMPT[1:])
    drafts = head.draft(head.make_cache(), hidden, mx.array([toks]), 3).tokens
    causal = mx.tril(mx.ones((len(toks), len(toks)), dtype=mx.bool_))  # MLA reads an array mask
    got = head.logits(head.step(mx.array([toks]), hidden, causal, head.make_cache()[0])[:, -1])
    want, first = [], (mx.arange(len(toks)) > 0)[:, None]  # grows with the drafts: row 0 stays masked
    for step in range(3):
        keep = mx.concatenate([first, mx.ones((step, 1), dtype=mx.bool_)]) if step else first
        e = head.pre_fc_norm_embedding(model.model.embed_tokens(mx.array([toks])))
        parts = [e * keep if VLLM_ZEROES[name] == "embed" else e, head.pre_fc_norm_hidden(hidden)]
        x = head.fc(mx.concatenate(parts[::-1] if name == "mimo" else parts, axis=-1))
        h = head.layers[0](x * keep if VLLM_ZEROES[name] == "fc" else x,
                           mx.tril(mx.ones((len(toks), len(toks)), dtype=mx.bool_)), None)
        logits = model.lm_head(head.norm(h[:, -1]))
        if step == 0:
            assert mx.allclose(got, logits, atol=1e-4), float(mx.abs(got - logits).max())
        want.append(int(mx.argmax(logits)))
        nxt = h[:, -1:] if name != "mimo" else head.norm(h[:, -1:])
        hidden, toks = mx.concatenate([hidden, nxt], axis=1), toks + [want[-1]]
    assert drafts == want


def test_a_checkpoint_without_mtp_weights_or_a_wrong_target_is_refused(root, tmp_path):
    mx.save_safetensors(str(tmp_path / "model.safetensors"), {"model.norm.weight": mx.ones((4,))})
    with pytest.raises(MtpFormatError, match="holds no mtp"):
        load_mtp(tmp_path, target("dense"))
    with pytest.raises(MtpFormatError, match="do not fit"):
        load_mtp(checkpoint("dense", root), target("hybrid"))


@pytest.mark.parametrize("name,ks", [("hybrid", range(1, 9)), ("dense", (1, 2, 5, 8)), ("mimo", (1, 3, 8)),
                                     ("deepseek", (1, 4, 8)), ("glm", range(1, 9)), ("glm_lite", (1, 3, 8))])
def test_greedy_output_is_plain_for_every_k(name, ks, root):
    head = load_mtp(checkpoint(name, root), target(name))
    for k in ks:
        stats = SpecStats()
        out = [e.token for e in token_stream(target(name), PROMPT, drafter=MtpDrafter(head, target(name)),
                                             max_tokens=16, num_draft_tokens=k, stats=stats)]
        assert out == plain(name, None), f"k={k}"
        assert stats.drafted > 0


@pytest.mark.parametrize("name,seed", [("mimo", None), ("glm", 6)])
def test_a_tree_budget_gets_the_blocks_linear_draft(name, seed, root):
    """EAGLE-2 trees need an EAGLE-3 head (fc, draft vocabulary): asked for a tree, the MTP
    drafter answers with its linear draft (it raised AttributeError inside the request);
    greedy and seeded output stay plain's."""
    head = load_mtp(checkpoint(name, root), target(name))
    sp = SamplingParams(temperature=0.0 if seed is None else 0.8, seed=seed)
    log: list[tuple[int, int]] = []
    out = [e.token for e in token_stream(target(name), PROMPT, drafter=MtpDrafter(head, target(name)),
                                         max_tokens=16, num_draft_tokens=3, tree_budget=8, step_log=log,
                                         sampling=sp)]
    assert out == plain(name, seed) and any(block > 1 for block, _ in log)


@pytest.mark.parametrize("name", list(TARGETS))
def test_seeded_sampling_is_plain_through_the_spec_path(name, root):
    """Built as the CLI and server build it: ``prepare_resources`` reads the model's own
    directory when no --draft-model is given."""
    model = target(name)
    model.specdec_source = checkpoint(name, root)
    spec = DraftSpec("mtp", gate=False)
    res = prepare_resources(spec, model, None)
    for seed, k in ((3, 1), (4, 4), (5, 8)):
        sp = SamplingParams(temperature=0.8, seed=seed)
        stats = SpecStats()
        out = [e.token for e in token_stream(model, PROMPT, drafter=build_drafter(spec, res, temperature=0.8,
                                                                                   seed=seed),
                                             max_tokens=16, num_draft_tokens=k, sampling=sp, stats=stats)]
        assert out == plain(name, seed), f"seed={seed} k={k}"
        assert stats.drafted > 0


def test_a_chain_with_suffix_drafting_keeps_plain_output(root):
    model = target("dense")
    spec = DraftSpec("mtp,suffix", draft_model=checkpoint("dense", root), gate=False)
    drafter, stats = build_drafter(spec, prepare_resources(spec, model, None)), SpecStats()
    out = [e.token for e in token_stream(model, PROMPT, drafter=drafter, max_tokens=16, num_draft_tokens=4,
                                         stats=stats)]
    assert out == plain("dense", None) and drafter.stats["mtp"]["drafted"] > 0


def test_the_spec_names_mtp_and_refuses_a_second_reader_of_draft_model():
    assert DraftSpec("mtp", draft_model="/x").draft_types == ("mtp",)
    DraftSpec("mtp,suffix", draft_model="/x").check_used()
    with pytest.raises(ValueError, match="mtp reads --draft-model"):
        DraftSpec("mtp,eagle", draft_model="/x").check_used()


class RecordingHead:
    """An MTP block that records each ``feed`` / ``draft`` call: (the block's cache offset = the
    first fed position, the hidden states fed (1, n, H), the tokens after them (1, n))."""

    def __init__(self, head: MtpHead):
        self.head, self.calls = head, []

    def __getattr__(self, name):
        return getattr(self.head, name)

    def feed(self, cache, hidden, tokens):
        self.calls.append((cache[0].offset, hidden, tokens))
        return self.head.feed(cache, hidden, tokens)

    def draft(self, cache, hidden, tokens, k):
        self.calls.append((cache[0].offset, hidden, tokens))
        return self.head.draft(cache, hidden, tokens, k)


def recording(head: MtpHead, model) -> MtpDrafter:
    return MtpDrafter(RecordingHead(head), model)


def test_the_block_is_fed_the_targets_normed_last_hidden_state_at_the_kept_rows(root):
    """Oracle: a fresh forward over the context gives the same hidden states (hybrid replay:
    the block's rows are the forward's last ones); the prompt's positions come first."""
    model = target("hybrid")
    drafter = recording(load_mtp(checkpoint("hybrid", root), model), model)
    out = [e.token for e in token_stream(model, PROMPT, drafter=drafter, max_tokens=12, num_draft_tokens=3)]
    assert len(drafter.head.calls) >= 3
    assert_fed_a_fresh_forwards_states(model, drafter, PROMPT + out)


def assert_fed_a_fresh_forwards_states(model, drafter: MtpDrafter, context) -> None:
    """Every call fed the next positions in order, from the first (the prompt's), each with a
    fresh forward's normed last hidden state and the token the context holds after it."""
    from specdec.eagle.capture import capture_layers

    n_layers = len(model.model.layers)
    calls, at = drafter.head.calls, 0
    for start, fed, follows in calls:
        n = fed.shape[1]
        assert start == at, [(s, f.shape[1]) for s, f, _ in calls]
        with capture_layers(model, (n_layers,)) as cap:
            model(mx.array([context[:start + n]]))
        want = model.model.norm(cap.hidden[n_layers])[:, start:]
        assert mx.allclose(fed, want, atol=1e-4), (start, fed.shape)
        assert follows[0].tolist() == context[start + 1:start + n + 1]
        at = start + n


def oracle_draft(model, head: MtpHead, prompt, k: int = 4) -> list[int]:
    """What the block drafts after one forward over the prompt, its states fed at once."""
    from specdec.eagle.capture import capture_layers

    n_layers = len(model.model.layers)
    with capture_layers(model, (n_layers,)) as cap:
        model(mx.array([prompt[:-1]]))
    hidden = model.model.norm(cap.hidden[n_layers])
    return head.draft(head.make_cache(), hidden, mx.array([prompt[1:]]), k).tokens


def started(model, head: MtpHead, prompts) -> list:
    """One started request per prompt (prefill chunks of 4), each with its own MTP drafter."""
    from specdec.decode.request import Request

    gen = Generation.of(max_tokens=8, num_draft_tokens=4, prefill_step_size=4)
    reqs = [Request(model, p, gen, drafter=MtpDrafter(head, model)) for p in prompts]
    for r in reqs:
        r.start()
    return reqs


@pytest.mark.parametrize("name", ["hybrid", "mimo"])
def test_a_chunked_prefill_feeds_the_block_the_prompt_so_the_first_step_drafts(name, root):
    """The prompt's positions reach the block in the prefill's own syncs (a hybrid's recurrent
    prefill and an attention-only one, in chunks): after the first proposal its cache offset
    is the target's and that proposal is what the block drafts from a fresh forward's states."""
    model = target(name)
    head = load_mtp(checkpoint(name, root), model)
    req, = started(model, head, [PROMPT])
    while not req.prefill(4):
        pass
    assert req.drafter.fed == len(PROMPT) - 2  # fed in the prefill's syncs; its last row drafts
    first = req.drafter.propose(PROMPT, 4)
    offsets = req.layers.positions() if name == "hybrid" else {c.offset for c in req.layers}
    assert offsets == {req.drafter.fed} == {len(PROMPT) - 1}  # one row per cached position
    assert len(first) == 4 and list(first.tokens) == oracle_draft(model, head, PROMPT)


def test_a_batched_prefill_feeds_each_rows_block_its_own_prompt(root):
    from specdec.decode.request import prefill_together

    model = target("mimo")
    head = load_mtp(checkpoint("mimo", root), model)
    reqs = started(model, head, [PROMPT, [7, 1, 2, 30, 31, 7, 1]])
    prefill_together(model, reqs)
    for r in reqs:
        p = r.prompt_ids
        drafted = r.drafter.propose(p, 4)
        assert list(drafted.tokens) == oracle_draft(model, head, p) and r.drafter.fed == len(p) - 1


def near_markov(name: str, eps: float):
    """A copy of a target whose layers add only ``eps`` times their output: its next token is
    nearly a function of the last one (hidden ~ embed(t)), so drafts of the block below that
    knows it are accepted in full and in part (context still tips some choices)."""
    arch, cfg = TARGETS[name]
    mod = importlib.import_module(f"mlx_lm.models.{arch}")
    model = mod.Model(mod.ModelArgs.from_dict(dict(cfg, model_type=arch, vocab_size=VOCAB)))
    outs = ("o_proj.weight", "out_proj.weight", "down_proj.weight")
    model.update(tree_map(lambda p: p, target(name).parameters()))
    model.update(tree_map_with_path(lambda k, p: p * eps if k.endswith(outs) else p, model.parameters()))
    mx.eval(model.parameters())
    return model


def knowing_block(model) -> MtpHead:
    """An MTP block that predicts the near-Markov target's token after next: it reads only the
    next token's embedding, normed as the target's final norm does (fc = [I | 0]), its layer
    adds nothing, so the shared LM head gives the target's choice after that token."""
    head = MtpHead(model)
    h = model.args.hidden_size
    head.update(tree_map_with_path(lambda k, p: mx.zeros_like(p) if k.endswith(
        ("o_proj.weight", "down_proj.weight")) else p, head.parameters()))
    parts = [mx.eye(h), mx.zeros((h, h))]  # [embedding | hidden], MiMo's the other way round
    head.fc.weight = mx.concatenate(parts[::-1] if head.layout.hidden_first else parts, axis=1)
    head.pre_fc_norm_embedding.weight = model.model.norm.weight
    head.norm.weight = mx.ones((h,))
    return head


@pytest.mark.parametrize("name,eps,ks", [("hybrid", 0.01, (3, 4)), ("mimo", 0.003, (4, 5)),
                                         ("deepseek", 0.01, (3, 4)), ("glm", 0.01, (3, 4))])
def test_accepted_drafts_roll_back_exactly(name, eps, ks):
    """Also the maths: a block reading the wrong half of its input (MiMo's order) drafts t + 1
    again, and drafts are then never accepted in full."""
    model = near_markov(name, eps)
    head = knowing_block(model)
    want = [e.token for e in token_stream(model, PROMPT, max_tokens=24)]
    for k in ks:
        stats, log = SpecStats(), []
        out = [e.token for e in token_stream(model, PROMPT, drafter=MtpDrafter(head, model), max_tokens=24,
                                             num_draft_tokens=k, stats=stats, step_log=log)]
        assert out == want, f"k={k}"
        assert any(a == L - 1 for L, a in log if L > 1), log  # every draft accepted
        assert any(a < L - 1 for L, a in log), log  # some rolled back
    sp = SamplingParams(temperature=0.5, seed=11)
    want = [e.token for e in token_stream(model, PROMPT, max_tokens=24, sampling=sp)]
    stats = SpecStats()
    out = [e.token for e in token_stream(model, PROMPT, drafter=MtpDrafter(head, model), max_tokens=24,
                                         num_draft_tokens=4, sampling=sp, stats=stats)]
    assert out == want and stats.accepted > 0


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.5, seed=11)],
                         ids=["greedy", "seeded"])
def test_the_cost_gate_prices_the_block_and_drafts_where_that_pays(sampling):
    """The block's measured cost (``measure.head_cost``) prices its proposals: on a flat verify
    curve drafting pays and the knowing block's drafts are accepted; on a steep one the gate
    pauses and its plain steps feed the block every position. Output is plain's (hybrid
    target; untimed gates: the curve alone prices, so this never depends on the clock)."""
    from specdec.measure import head_cost
    from specdec.policy.gate import CostGate

    model = near_markov("hybrid", 0.01)
    head = knowing_block(model)
    cost = head_cost(head, context=32, repeats=2)
    assert set(cost) == {"fixed", "per_token"} and cost["fixed"] + cost["per_token"] > 0
    want = [e.token for e in token_stream(model, PROMPT, max_tokens=16, sampling=sampling)]
    flat, steep = ({L: 1.0 + slope * (L - 1) for L in range(1, 6)} for slope in (0.0, 10.0))
    stats, pays = SpecStats(), CostGate(MtpDrafter(head, model), flat, k_max=4, draft_cost=cost, timed=False)
    out = [e.token for e in token_stream(model, PROMPT, drafter=pays, max_tokens=16, num_draft_tokens=4,
                                         sampling=sampling, stats=stats)]
    assert out == want and stats.accepted > 0
    drafter = MtpDrafter(head, model)
    paused = CostGate(drafter, steep, k_max=4, draft_cost=cost, timed=False)
    out = [e.token for e in token_stream(model, PROMPT, drafter=paused, max_tokens=16, num_draft_tokens=4,
                                         sampling=sampling)]
    assert out == want and paused.paused_tokens > 0
    drafter.propose(PROMPT + out, 1)  # every position the target fed reaches the block, once
    assert drafter.fed == len(PROMPT + out) - 1


def test_fused_expert_weights_are_split_as_mlx_lm_splits_them():
    """Qwen3.5-MoE stores experts fused (``experts.gate_up_proj`` (E, 2I, H), ``experts.down_proj``)."""
    from specdec.eagle.mtp import canonical

    gate_up, down = mx.arange(2 * 6 * 3).reshape(2, 6, 3), mx.ones((2, 3, 3))
    out = canonical({"layers.0.mlp.experts.gate_up_proj": gate_up, "layers.0.mlp.experts.down_proj": down,
                     "layers.0.input_layernorm.weight": mx.zeros((3,))})
    assert mx.array_equal(out["layers.0.mlp.switch_mlp.gate_proj.weight"], gate_up[:, :3])
    assert mx.array_equal(out["layers.0.mlp.switch_mlp.up_proj.weight"], gate_up[:, 3:])
    assert mx.array_equal(out["layers.0.mlp.switch_mlp.down_proj.weight"], down)
    assert mx.array_equal(out["layers.0.input_layernorm.weight"], mx.ones((3,)))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny hybrid Qwen3.5 directory as ``specdec`` loads it, its mtp.* shard beside the
    weights mlx-lm loads (which drop it)."""
    from hybrid_tiny import save_dir

    from specdec.loader import load

    d = save_dir("qwen3_5", tmp_path_factory.mktemp("mtp-dir") / "ckpt")
    model, _ = load(str(d))
    mx.random.seed(1)
    head = MtpHead(model)
    head.update(tree_map(lambda p: mx.random.normal(p.shape) * 0.15, head.parameters()))
    mx.save_safetensors(str(d / "model-mtp.safetensors"), published(head))
    return d


def test_the_server_drafts_with_the_models_own_mtp_block_gated_or_not(model_dir, tmp_path, monkeypatch):
    """``specdec serve --model DIR --draft-type mtp`` (the cost gate on: no --no-gate) in process:
    the worker loads the block from the model's own directory; greedy and seeded answers equal
    plain ones gated (the block's cost priced; whether it drafts is the machine's timing) and
    ungated (drafts made)."""
    import asyncio

    from conftest import seed_cost_curve

    from specdec.loader import load
    from specdec.server.config import ServerConfig
    from specdec.server.engine.events import DoneEvent, GenRequest, Job, TokenEvent
    from specdec.server.engine.admission import enqueue
    from specdec.server.engine.worker import InferenceWorker
    from specdec.server.http.metrics import Metrics

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    # a hybrid target's curve is never measured by a server: a cached one turns its gate on
    seed_cost_curve(load(str(model_dir))[0], {L: 1e-3 * L for L in range(1, 129)}, tmp_path)

    async def tokens(worker, spec, sampling):
        job = Job(GenRequest(PROMPT, Generation(max_tokens=16, draft=spec, sampling=sampling)),
                  asyncio.get_running_loop())
        enqueue(worker.cfg, worker, job)
        out = []
        while not isinstance(e := await asyncio.wait_for(job.events.get(), 120), DoneEvent):
            out += [e.token] if isinstance(e, TokenEvent) else []
        return out, e.usage

    worker = InferenceWorker(ServerConfig(model=str(model_dir), speculation=DraftSpec("mtp"), save_interval=0,
                                          context_length=512), Metrics())
    worker.start()
    try:
        assert worker.mtp is not None and worker.draft is None and worker.curve is not None
        for sp in (SamplingParams(), SamplingParams(temperature=0.8, seed=5)):
            want, _ = asyncio.run(tokens(worker, DraftSpec("none"), sp))
            assert asyncio.run(tokens(worker, DraftSpec("mtp"), sp))[0] == want
            got, usage = asyncio.run(tokens(worker, DraftSpec("mtp", gate=False), sp))
            assert got == want and usage["drafted_tokens"] > 0, usage
        cost = worker._draft_costs["mtp"]
        assert set(cost) == {"fixed", "per_token"} and cost["fixed"] + cost["per_token"] > 0
    finally:
        worker.stop()


def test_generate_with_mtp_under_the_default_gate_keeps_parity(model_dir, tmp_path, monkeypatch, capsys):
    """``specdec generate --model DIR --draft-type mtp --compare`` (no --no-gate), in process:
    the block's cost is measured and cached like a head's, the output is plain's."""
    from specdec.cli import main
    from specdec.loader import load
    from specdec.measure import draft_cost_for
    from specdec.resources import prepare_resources

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert main(["generate", "--model", str(model_dir), "--draft-type", "mtp", "--prompt", "abc abc abc",
                 "--max-tokens", "16", "--num-draft-tokens", "2", "--compare", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parity"] is True
    cached = list((tmp_path / "cost").glob("draft-mtp-*.json"))
    assert len(cached) == 1
    model = load(str(model_dir))[0]
    res = prepare_resources(DraftSpec("mtp"), model, None)
    assert res.draft_cost == json.loads(cached[0].read_text()) == draft_cost_for("mtp", model, mtp=res.mtp)


def test_batched_rows_each_draft_from_their_own_block_state():
    """Three rows of an attention-only (batchable) target in one ``Batch`` under a flat cost
    (drafting pays): each row's own hidden states reach its drafter (a fresh forward's), and
    each row's tokens equal its request decoded alone, with drafts accepted."""
    from specdec.decode import loop
    from specdec.decode.batch import Batch
    from specdec.decode.request import Request

    model = near_markov("mimo", 0.003)
    head = knowing_block(model)
    prompts = [[5 + i, 9, 17, 3, 5 + i, 9] for i in range(3)]
    want = [[e.token for e in token_stream(model, p, max_tokens=12)] for p in prompts]
    batch, live, out, accepted, drafted = Batch(model, lambda n: 1.0, learn=False), [], {}, 0, 0
    drafters = [recording(head, model) for _ in prompts]
    for i, p in enumerate(prompts):
        req = Request(model, p, Generation(max_tokens=12), drafter=drafters[i])
        req.start()
        req.prefill()
        batch.join(req.row(), req.layers)
        live.append((i, req))
        out[i] = []
    while live:
        steps = loop.step(batch)
        for (i, req), s in zip(live, steps):
            out[i] += [e.token for e in req.feed(s)]
            accepted += s.accepted if len(steps) > 1 else 0
            drafted += s.drafted if len(steps) > 1 else 0
        done = [j for j, (_, req) in enumerate(live) if req.finish_reason]
        batch.leave_rows(done)
        live = [x for j, x in enumerate(live) if j not in set(done)]
    assert [out[i] for i in range(3)] == want
    assert accepted > 0
    for i, d in enumerate(drafters):
        assert len(d.head.calls) >= 2
        assert_fed_a_fresh_forwards_states(model, d, prompts[i] + out[i])


def test_kept_reads_a_blocks_accepted_rows_from_any_later_context():
    """The shared bookkeeping (``drafters.eagle.Rows``): a verify block at position 1 with
    drafts (1, 2, 3) keeps its root and the drafts the context repeats, once it holds them."""
    from specdec.drafters.eagle import Rows

    block = Rows(1, features=mx.zeros((4, 1)), drafts=(1, 2, 3))
    assert [block.kept([0, 0, *t]) for t in ([7], [1, 7], [1, 2, 9], [1, 2, 3, 4], [1, 2, 3, 4, 5, 1])] == \
        [1, 2, 3, 4, 4]
    assert Rows(1, features=mx.zeros((1, 1)), drafts=()).kept([0, 0, 5, 6]) == 1
    assert Rows(1, drafts=()).kept([0, 0, 5, 6]) == 0  # its step's sync never ran


class EveryOther(Drafter):
    """Proposes one token at every other context length (so a chain's next member is skipped
    on those steps)."""

    name = "every-other"

    def propose(self, context, k):
        return Proposal([(context[-1] + 1) % VOCAB]) if len(context) % 2 == 0 else EMPTY


def test_behind_another_drafter_in_a_chain_every_verified_block_is_fed_in_order():
    """Steps another member wins are fed to the block at its next turn, so its cache holds
    every verified position, contiguously, with a fresh forward's states."""
    from specdec.drafters.chain import ChainDrafter

    model = near_markov("hybrid", 0.01)
    drafter = recording(knowing_block(model), model)
    chain = ChainDrafter([EveryOther(), drafter])
    want = [e.token for e in token_stream(model, PROMPT, max_tokens=24)]
    out = [e.token for e in token_stream(model, PROMPT, drafter=chain, max_tokens=24, num_draft_tokens=4)]
    assert out == want and chain.stats["every-other"]["won"] > 2 and chain.stats["mtp"]["won"] > 2
    drafter.propose(PROMPT + out, 1)  # what the last steps verified joins the block
    assert drafter.fed == len(PROMPT + out) - 1
    assert_fed_a_fresh_forwards_states(model, drafter, PROMPT + out)


def test_a_server_refuses_mtp_requests_only_without_the_block():
    from specdec.server.engine.speculative import refuse_unloaded

    from types import SimpleNamespace

    bare, loaded = SimpleNamespace(draft=None, mtp=None), SimpleNamespace(draft=None, mtp=object())
    with pytest.raises(ValueError, match="started with --draft-type mtp"):
        refuse_unloaded(DraftSpec("mtp", gate=False), bare)
    refuse_unloaded(DraftSpec("mtp"), loaded)  # the cost gate prices it
    with pytest.raises(ValueError, match="started with --draft-model"):
        refuse_unloaded(DraftSpec("model", draft_model="x"), loaded)
    refuse_unloaded(DraftSpec("mtp,suffix", gate=False), loaded)
    refuse_unloaded(DraftSpec("suffix"), SimpleNamespace())  # names nothing: reads nothing
