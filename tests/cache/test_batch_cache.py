"""``specdec.cache.batch_cache``: the rows cache against brute force (rows of different
lengths join, keep random prefixes, leave and join again: holes and all), and the
refusals of ``trim_rows``."""

import mlx.core as mx
import pytest
from conftest import cached_tiny, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import KVCache

from specdec.cache.batch_cache import RowsKVCache, trim_rows
from specdec.cache.rollback import RollbackError, make_cache


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=4),
       st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
def test_rows_cache_equals_brute_force(lengths, blocks, data):
    """Rows of different lengths join, then take blocks and keep a random prefix of each
    (``trim_rows``), rows leaving and joining on the way (``extract`` then ``filter``,
    ``extend``; holes and all):
    every row's unmasked keys equal exactly what it kept, in order, its RoPE offset counts
    them, and ``extract`` returns them as a KVCache."""
    B, tag = len(lengths), iter(range(1, 10_000))
    rows = [[float(next(tag)) for _ in range(n)] for n in lengths]
    cache = None
    def kv_of(r):
        kv = KVCache()
        if r:
            a = mx.array(r).reshape(1, 1, len(r), 1)
            kv.update_and_fetch(a, a)
        return kv

    for r in rows:
        one = RowsKVCache.from_kv(kv_of(r))
        cache = one if cache is None else (cache.extend(one) or cache)
    def extracted(i):
        got = cache.extract(i)
        assert got.offset == len(rows[i])
        assert (got.keys[0, 0, :, 0].tolist() if rows[i] else []) == rows[i]

    for fed in blocks:
        new = [[float(next(tag)) for _ in range(fed)] for _ in range(B)]
        keep = [data.draw(st.integers(0, fed)) for _ in range(B)]
        mask = cache.make_mask(fed, return_array=True)
        a = mx.array(new).reshape(B, 1, fed, 1)
        k, _ = cache.update_and_fetch(a, a)
        mask = mx.broadcast_to(mask, (B, 1, fed, k.shape[2]))  # (N, S) when nothing is masked
        # the last query of each row sees exactly that row's keys so far
        seen = [[v for v, m in zip(k[i, 0, :, 0].tolist(), mask[i, 0, -1].tolist()) if m]
                for i in range(B)]
        assert seen == [rows[i] + new[i] for i in range(B)]
        trim_rows([cache], fed, keep)
        rows = [rows[i] + new[i][: keep[i]] for i in range(B)]
        assert cache.offset.tolist() == [len(r) for r in rows]
        leaving = data.draw(st.sets(st.integers(0, B - 1), max_size=B - 1)) if B > 1 else set()
        for i in leaving:
            extracted(i)
        if leaving:
            stay = [i for i in range(B) if i not in leaving]
            cache.filter(stay)
            rows, B = [rows[i] for i in stay], len(stay)
            assert cache.offset.tolist() == [len(r) for r in rows]
        for n in data.draw(st.lists(st.integers(0, 9), max_size=2)):  # rows join the holes
            rows.append([float(next(tag)) for _ in range(n)])
            cache.extend(RowsKVCache.from_kv(kv_of(rows[-1])))
            B += 1
    for i in reversed(range(B)):
        extracted(i)


def test_trim_rows_refuses_what_it_cannot_do():
    c = RowsKVCache([0, 0])
    c.update_and_fetch(mx.zeros((2, 1, 3, 1)), mx.zeros((2, 1, 3, 1)))
    with pytest.raises(RollbackError, match="keep"):
        trim_rows([c], 2, [3, 0])
    with pytest.raises(RollbackError, match="cannot trim"):
        trim_rows([c], 4, [0, 0])
    with pytest.raises(RollbackError, match="not a RowsKVCache"):
        trim_rows(make_cache(cached_tiny("llama")), 1, [0])
