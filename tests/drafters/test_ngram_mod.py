"""ngram-mod: the hash table against brute-force oracles, the drafter's insertion schedule,
reset, persistence (atomicity, fingerprints), sharing across threads, and greedy parity on
real weights."""

import os
import random
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import SHARED_TOKENS, assert_stats_speculated, examples, plain_reference
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from specdec.drafters.ngram_mod import (
    EMPTY,
    MULT,
    NgramModDrafter,
    NgramModTable,
    draft_walk,
    ngram_hash,
    roll_hash,
    slot_of,
    tokenizer_fingerprint,
    window_slots,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
tokens_st = st.lists(st.integers(0, 5), max_size=50)  # small alphabet: many repeats


# ---------------------------------------------------------------- hashing


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12), st.integers(0, 2**31 - 1))
def test_roll_hash_equals_rehash(window, new):
    top = pow(MULT, len(window) - 1, 1 << 64)
    assert roll_hash(ngram_hash(window), window[0], new, top) == ngram_hash(window[1:] + [new])


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=4, max_size=40), st.integers(1, 4),
       st.sampled_from([1, 3, 7, 4096, 1000003]))
def test_vectorised_hashes_equal_python(tokens, n, size):
    got = window_slots(tokens, n, size).tolist()
    want = [slot_of(ngram_hash(tokens[i : i + n]), size) for i in range(len(tokens) - n + 1)]
    assert got == want


# ---------------------------------------------------------------- table vs oracles


def slot_oracle(size, n, batches):
    """Table semantics written out: slot -> token, every entry in insertion order."""
    slots = {}
    for toks in batches:
        for j in range(n, len(toks)):
            slots[slot_of(ngram_hash(toks[j - n : j]), size)] = toks[j]
    return slots


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(tokens_st, max_size=4), st.integers(1, 3), st.integers(1, 8))
def test_insert_matches_slot_oracle_with_collisions(batches, n, size):
    """Tiny tables collide all the time: the later entry always wins its slot."""
    table = NgramModTable(size, n)
    for toks in batches:
        table.insert(toks)
    want = np.full(size, EMPTY)
    for s, t in slot_oracle(size, n, batches).items():
        want[s] = t
    assert table.snapshot().tolist() == want.tolist()
    assert table.used == int(np.count_nonzero(want != EMPTY))


def test_collision_overwrites():
    table = NgramModTable(1, 2)  # one slot: every 2-gram collides
    table.insert([1, 2, 3])
    assert table.draft([1, 2], 3) == [3, 3, 3]  # [2, 3] hashes to the same slot
    table.insert([7, 8, 9])  # a different 2-gram overwrites
    assert table.draft([1, 2], 2) == [9, 9]
    assert table.occupancy() == 1.0


def test_docstring_walk():
    table = NgramModTable(64, 2)
    table.insert([5, 6, 7, 8])
    assume_distinct = {slot_of(ngram_hash(w), 64) for w in ([5, 6], [6, 7], [7, 8])}
    assert len(assume_distinct) == 3  # the example relies on no collision at size 64
    assert table.draft([1, 5, 6], 4) == [7, 8]
    assert table.draft([1, 5, 6], 1) == [7]
    assert table.draft([1, 5, 6], 4, eos={7}) == [7]
    assert table.draft([6], 4) == []
    assert table.draft([1, 5, 6], 0) == []
    assert draft_walk(table.snapshot(), 2, [5, 6], 4) == [7, 8]


def dict_walk(d, n, context, k, eos, occupied, size):
    """The oracle draft: walk a plain {n-gram: next token} dict."""
    if k <= 0 or len(context) < n:
        return []
    window, out = list(context[-n:]), []
    while len(out) < k:
        nxt = d.get(tuple(window))
        if nxt is None:
            # the table agrees only if this unknown n-gram lands on a free slot
            assume(slot_of(ngram_hash(window), size) not in occupied)
            break
        out.append(nxt)
        if nxt in eos:
            break
        window = window[1:] + [nxt]
    return out


requests_st = st.lists(
    st.tuples(st.lists(st.integers(0, 5), min_size=1, max_size=40),  # prompt
              st.lists(st.integers(0, 5), max_size=80),  # generated text
              st.lists(st.integers(1, 9), min_size=1, max_size=20)),  # tokens per step
    min_size=1, max_size=3)


@settings(max_examples=examples(300), deadline=None)
@given(requests_st, st.integers(1, 3), st.integers(0, 6), st.integers(0, 40),
       st.sets(st.integers(0, 5), max_size=1))
def test_drafter_matches_dict_oracle(requests, n, k, gate, eos):
    """With no collisions, every proposal equals walking a dict built by the same
    insertion schedule: prompt at request start, then chunks once cur_len - i_last > gate,
    the rest of the request's text (``end``: its whole output, past the last proposal's
    context) when it ends."""
    size = 1 << 16
    # a first token of its own marks each request as new (not an extension of the last)
    requests = [([100 + r] + p, g, steps) for r, (p, g, steps) in enumerate(requests)]
    windows = {tuple((p + g)[j - n : j]) for p, g, _ in requests for j in range(n, len(p + g) + 1)}
    assume(len({slot_of(ngram_hash(w), size) for w in windows}) == len(windows))
    table = NgramModTable(size, n)
    drafter = NgramModDrafter(table, eos=eos, gate=gate, reset_streak=None)
    d, occupied = {}, set()

    def insert(toks, lo, hi):
        for j in range(max(lo, n), hi):
            d[tuple(toks[j - n : j])] = toks[j]
            occupied.add(slot_of(ngram_hash(toks[j - n : j]), size))

    for prompt, gen, steps in requests:
        full, cur = prompt + gen, len(prompt)
        drafter.begin(prompt)
        insert(full, 0, cur)
        i_last = cur
        for step in steps * (1 + len(gen)):
            if i_last + gate < cur:
                insert(full, i_last, cur)
                i_last = cur
            got = list(drafter.propose(full[:cur], k).tokens)
            assert got == dict_walk(d, n, full[:cur], k, eos, occupied, size)
            drafter.observe(0)
            if cur == len(full):
                break
            cur = min(cur + step, len(full))
        drafter.end(full)
        insert(full, i_last, len(full))
    snap = table.snapshot()
    assert table.used == len(d)
    assert all(snap[slot_of(ngram_hash(w), size)] == t for w, t in d.items())


# ---------------------------------------------------------------- drafter schedule


def test_gate_inserts_nothing_until_32_new_tokens_then_everything_and_the_rest_at_end():
    n, size = 2, 1 << 16
    prompt = list(range(100, 110))
    gen = list(range(200, 240))
    table = NgramModTable(size, n)
    drafter = NgramModDrafter(table)  # default gate: 32
    drafter.begin(prompt)
    drafter.propose(prompt, 4)
    assert table.used == len(prompt) - n  # the prompt, ungated
    for i in range(1, 33):
        drafter.propose(prompt + gen[:i], 4)
        assert table.used == len(prompt) - n, i  # i_last + 32 < cur_len is still false
    drafter.propose(prompt + gen[:33], 4)
    full = NgramModTable(size, n)
    full.insert(prompt + gen[:33])
    assert table.used == len(prompt) + 33 - n
    assert (table.snapshot() == full.snapshot()).all()  # everything up to cur_len
    drafter.propose(prompt + gen[:38], 4)  # 5 more: under the gate again
    assert table.used == len(prompt) + 33 - n
    drafter.end(prompt + gen[:40])  # the request ends: its gated tail and last tokens join
    full.insert(prompt + gen[:40])
    assert table.used == len(prompt) + 40 - n
    assert (table.snapshot() == full.snapshot()).all()


def test_generated_text_drafts_after_the_gate():
    table = NgramModTable(1 << 16, 3)
    drafter = NgramModDrafter(table, gate=4)
    seq = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3]
    drafter.begin(seq[:2])
    assert drafter.propose(seq[:13], 4).tokens == (4, 5, 6, 7)


def test_reset_on_low_acceptance_streak_then_reseed():
    table = NgramModTable(1 << 12, 2)
    table.insert([50, 51, 52, 53])  # foreign traffic
    d = NgramModDrafter(table, reset_below=0.5, reset_streak=3)
    other = NgramModDrafter(table, reset_streak=None)
    other.begin([60, 61, 62])  # another request sharing the table
    ctx = [1, 2, 3, 4, 1, 2]
    d.begin(ctx)
    for accepted in (0, 1, 3, 0, 1):  # 1/3 < 0.5 counts, 3/3 breaks the streak
        assert d.propose(ctx, 3).tokens == (3, 4, 1)
        d.observe(accepted)
    assert table.resets == 0 and table.used == 2 + 4 + 1
    d.propose(ctx, 3)
    d.observe(0)  # the third low proposal in a row
    assert table.resets == 1 and table.used == 0 and table.occupancy() == 0.0
    for _ in range(5):
        d.observe(0)  # no proposal since: no evidence
    assert table.resets == 1
    # each sharer puts its own request's text back at its next proposal; foreign text is gone
    assert d.propose(ctx, 3).tokens == (3, 4, 1) and table.used == 4
    assert table.draft([50, 51], 2) == []
    other.propose([60, 61, 62, 63], 3)
    assert table.used == 4 + 2 and table.draft([60, 61], 3) == [62, 63]


def test_reset_off():
    table = NgramModTable(1 << 12, 2)
    d = NgramModDrafter(table, reset_streak=None)
    d.begin([1, 2, 3, 4, 1, 2])
    for _ in range(10):
        d.propose([1, 2, 3, 4, 1, 2], 3)
        d.observe(0)
    assert table.resets == 0 and table.used == 4


def test_occupancy_numbers():
    table = NgramModTable(1000, 1)
    table.insert(list(range(101)))  # 100 distinct 1-grams
    expect = len({slot_of(ngram_hash([t]), 1000) for t in range(100)})
    assert table.occupancy() == expect / 1000 and expect >= 95
    small = NgramModTable(4, 1)
    small.insert(list(range(200)))
    assert small.occupancy() == 1.0
    small.reset()
    assert small.occupancy() == 0.0


def test_drafter_validates():
    table = NgramModTable(16, 4)
    with pytest.raises(ValueError, match="4-grams"):
        NgramModDrafter(table, n=3)
    with pytest.raises(ValueError):
        NgramModTable(0, 4)
    with pytest.raises(ValueError):
        table.insert([1, -2, 3, 4, 5])
    assert NgramModDrafter(table).name == "ngram-mod"


# ---------------------------------------------------------------- persistence


def filled(size, n, seed, fp="fp-a"):
    rng = np.random.default_rng(seed)
    t = NgramModTable(size, n, tokenizer_fingerprint=fp)
    t.insert(rng.integers(0, 50_000, size=2 * size).tolist())
    return t


def test_save_load_round_trip(tmp_path):
    t = filled(1 << 12, 3, 0)
    path = tmp_path / "table.npz"
    t.save(path)
    u = NgramModTable.load(path, tokenizer_fingerprint="fp-a")
    assert (u.n, u.size, u.fingerprint, u.used) == (t.n, t.size, "fp-a", t.used)
    assert (u.snapshot() == t.snapshot()).all()
    ctx = [1, 2, 3]
    assert u.draft(ctx, 8) == t.draft(ctx, 8)
    assert [p.name for p in tmp_path.iterdir()] == ["table.npz"]  # no temp file left


def test_wrong_fingerprint_refused(tmp_path):
    path = tmp_path / "t.npz"
    filled(64, 2, 0, fp="vocab-sha256:aaa").save(path)
    with pytest.raises(ValueError, match="vocab-sha256:aaa.*vocab-sha256:bbb"):
        NgramModTable.load(path, tokenizer_fingerprint="vocab-sha256:bbb")
    with pytest.raises(ValueError, match="fingerprint"):
        NgramModTable(64, 2).save(tmp_path / "u.npz")  # no fingerprint to store
    (tmp_path / "junk.npz").write_bytes(b"not a table")
    with pytest.raises(ValueError, match="not a readable"):
        NgramModTable.load(tmp_path / "junk.npz", tokenizer_fingerprint="x")
    with open(tmp_path / "v9.npz", "wb") as f:
        np.savez(f, meta=np.array('{"format": "specdec-ngram-mod", "version": 9}'),
                 used=np.zeros(0, np.int64), tokens=np.zeros(0, np.int32))
    with pytest.raises(ValueError, match="version"):
        NgramModTable.load(tmp_path / "v9.npz", tokenizer_fingerprint="x")


SAVER = """
import os, signal, sys
import numpy as np
sys.path.insert(0, {repo!r})
from specdec.drafters.ngram_mod import NgramModTable
def filled(size, n, seed):
    rng = np.random.default_rng(seed)
    t = NgramModTable(size, n, tokenizer_fingerprint="fp-a")
    t.insert(rng.integers(0, 50_000, size=2 * size).tolist())
    return t
tables = [filled({size}, 2, 1), filled({size}, 2, 2)]
if {die_before_rename}:  # a crash at the worst moment: temp file complete, not renamed
    os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
print("ready", flush=True)
i = 0
while True:
    tables[i % 2].save({path!r})
    i += 1
"""


def start_saver(path, size, die_before_rename):
    code = SAVER.format(repo=REPO, size=size, path=str(path), die_before_rename=die_before_rename)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_save_killed_before_rename_leaves_old_file(tmp_path):
    path = tmp_path / "t.npz"
    old = filled(1 << 12, 2, 0)
    old.save(path)
    p = start_saver(path, 1 << 12, die_before_rename=True)
    assert p.wait(timeout=60) == -signal.SIGKILL
    strays = [q for q in tmp_path.iterdir() if q.name.endswith(".tmp")]
    assert len(strays) == 1 and strays[0].stat().st_size > 0  # the complete, unrenamed temp
    loaded = NgramModTable.load(path, tokenizer_fingerprint="fp-a")
    assert (loaded.snapshot() == old.snapshot()).all()
    new = filled(1 << 12, 2, 1)
    new.save(path)  # a later save is not disturbed by the stray file
    loaded = NgramModTable.load(path, tokenizer_fingerprint="fp-a")
    assert (loaded.snapshot() == new.snapshot()).all()


@pytest.mark.slow  # three saver processes; the fast suite keeps the kill before the rename above
def test_sigkill_during_saves_never_tears_the_file(tmp_path):
    path, size = tmp_path / "t.npz", 1 << 18
    valid = [filled(size, 2, s).snapshot() for s in (0, 1, 2)]
    filled(size, 2, 0).save(path)
    rng = random.Random(0)
    for _ in range(3):
        p = start_saver(path, size, die_before_rename=False)
        threading.Event().wait(rng.uniform(0.05, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        snap = NgramModTable.load(path, tokenizer_fingerprint="fp-a").snapshot()
        assert any((snap == v).all() for v in valid)


# ---------------------------------------------------------------- sharing across threads


def test_concurrent_readers_with_one_writer():
    size, n, vocab = 1 << 10, 2, 1000  # small: readers constantly hit slots being rewritten
    table = NgramModTable(size, n)
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, vocab, size=200).tolist() for _ in range(150)]
    errors, done, drafted = [], threading.Event(), [0]

    def reader(seed):
        r = random.Random(seed)
        try:
            while not done.is_set():
                ctx = [r.randrange(vocab) for _ in range(n)]
                out = table.draft(ctx, 8)
                assert len(out) <= 8 and all(0 <= t < vocab for t in out)
                drafted[0] += len(out)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    readers = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in readers:
        t.start()
    for i, c in enumerate(chunks):
        table.insert(c)
        if i == 75:
            table.reset()
    done.set()
    for t in readers:
        t.join()
    assert not errors and drafted[0] > 0
    seq = NgramModTable(size, n)
    for c in chunks[76:]:
        seq.insert(c)
    assert (table.snapshot() == seq.snapshot()).all()  # same state as a sequential build
    assert table.used == int(np.count_nonzero(table.snapshot() != EMPTY))


def test_drafters_in_threads_share_one_table():
    table = NgramModTable(1 << 14, 3)
    text = list(range(300)) * 2
    errors = []

    def serve(seed):
        try:
            d = NgramModDrafter(table, gate=8)
            d.begin(text[: 5 + seed])
            for cur in range(5 + seed, len(text), 3):
                out = d.propose(text[:cur], 4).tokens
                d.observe(len(out))
                assert all(0 <= t < 300 for t in out)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=serve, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    last = NgramModDrafter(table)
    last.begin([7, 8, 9])
    assert last.propose([7, 8, 9], 4).tokens == (10, 11, 12, 13)


# ---------------------------------------------------------------- real tokenizer and weights


def test_tokenizer_fingerprint():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    a = Tokenizer(WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    b = Tokenizer(WordLevel({"a": 1, "b": 0, "[UNK]": 2}, unk_token="[UNK]"))
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(a)
    assert tokenizer_fingerprint(a) != tokenizer_fingerprint(b)
    with pytest.raises(TypeError):
        tokenizer_fingerprint(object())


@pytest.fixture(scope="module")
def smol():
    from conftest import real_model

    return real_model("smollm2-135m")


def test_fingerprint_of_mlx_lm_wrapper(smol):
    _, tok = smol
    fp = tokenizer_fingerprint(tok)
    assert fp == tokenizer_fingerprint(tok.backend_tokenizer) and fp.startswith("vocab-sha256:")


def run(model, prompt, drafter, max_tokens, eos):
    from specdec.engine import token_stream
    from specdec.core.stats import SpecStats

    stats = SpecStats()
    toks = [e.token for e in token_stream(model, prompt, drafter=drafter, max_tokens=max_tokens,
                                          num_draft_tokens=4, eos=eos, stats=stats)]
    return toks, stats


def reference(name):
    """Plain decoding of a parity prompt, once per session (``plain_reference``: tests/parity's
    rows decode demo_colorsys to the same length)."""
    from specdec.prompts import parity_prompts

    return plain_reference("smollm2-135m", parity_prompts()[name], MAX_TOKENS).tokens


# each parity prompt's evidence (drafts accepted and rejected; the second request accepting
# more) shows within 48 tokens; 64 cost a third more
MAX_TOKENS = SHARED_TOKENS
PARITY = ("code_fnmatch_rename", "demo_colorsys")


@pytest.mark.slow
@pytest.mark.parametrize("name", PARITY)
def test_greedy_parity_on_real_weights(smol, name):
    from specdec.prompts import parity_prompts
    from specdec.core.text import encode_prompt

    model, tok = smol
    eos = tok.eos_token_ids
    ids = encode_prompt(tok, parity_prompts()[name])
    table = NgramModTable(tokenizer_fingerprint=tokenizer_fingerprint(tok))
    out, stats = run(model, ids, NgramModDrafter(table, eos=eos), MAX_TOKENS, eos)
    assert out == reference(name)
    assert_stats_speculated(stats, name)


@pytest.mark.slow
def test_second_request_on_a_shared_table_accepts_more(smol):
    from specdec.prompts import parity_prompts
    from specdec.core.text import encode_prompt

    model, tok = smol
    eos = tok.eos_token_ids
    ids = encode_prompt(tok, parity_prompts()[PARITY[0]])
    table = NgramModTable(tokenizer_fingerprint=tokenizer_fingerprint(tok))
    first, s1 = run(model, ids, NgramModDrafter(table, eos=eos), MAX_TOKENS, eos)
    # the same request again (a multi-turn style repeat) drafts from the shared table
    second, s2 = run(model, ids, NgramModDrafter(table, eos=eos), MAX_TOKENS, eos)
    assert first == second == reference(PARITY[0])
    # more tokens accepted and more tokens per verify step; the rate itself may dip,
    # since the prompt, inserted last, overwrites the answer where the answer edits it
    assert s2.accepted > s1.accepted
    assert s2.mean_acceptance_length > s1.mean_acceptance_length


def test_library_calls_leave_their_whole_answer_in_the_process_table(smol):
    """A library call drafting with ngram-mod builds a drafter over the process's table;
    its answer joins that table at the request's end (``Drafter.end``), so the same new
    question asked again drafts it: a 16-token answer never reached it in chunks of 32
    (0 accepted again without ``end``; 14 of 16 with it)."""
    import specdec
    from specdec.drafters.spec import DraftSpec

    model, tok = smol
    # a table size of its own: a fresh process-wide table, whatever ran before
    spec = DraftSpec("ngram-mod", num_draft_tokens=8, gate=False, ngram_mod_size=4099)
    msgs = [{"role": "user", "content": "Name the planets of the solar system in order."}]
    cold = specdec.generate(model, tok, msgs, max_tokens=16, drafter=spec)
    warm = specdec.generate(model, tok, msgs, max_tokens=16, drafter=spec)
    assert warm.tokens == cold.tokens and len(cold.tokens) == 16
    assert cold.stats.accepted <= 4 and warm.stats.accepted >= 12, (cold.stats, warm.stats)
