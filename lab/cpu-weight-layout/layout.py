"""Does storing fp32 weights column-major speed up mlx-cpu decoding, with identical logits?

One process, one model: the loader's weights (column-major, ``loader.api.column_major_weights``)
against row-major copies of them ("row": as mlx-lm loads them) and row-major but for the head
("head"), interleaved: 4 rounds x 3 layouts x 12 one-token and 9-token steps after a 121-token
prompt; medians printed. Every layout's 9-token logits must equal the first's bit for bit.
Run: ``PYTHONPATH=. python lab/cpu-weight-layout/layout.py smollm2-135m`` (or qwen2.5-coder-0.5b);
``... smollm2-135m 8``: also a batch of 8 rows' one-token step (a server's decode-heavy round).
"""

import os
import sys
import time

from specdec.backend import openblas_path, openblas_preloaded, preload_env

if openblas_path() and not openblas_preloaded() and not os.environ.get("LAYOUT_REEXEC"):
    # before mlx loads: this script again with OpenBLAS preloaded (specdec.backend's
    # ensure_openblas re-executes `python -m specdec`, not a script)
    os.execve(sys.executable, [sys.executable, *sys.argv], {**preload_env(), "LAYOUT_REEXEC": "1"})
import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
from mlx.utils import tree_unflatten  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from specdec.loader import load  # noqa: E402


def layouts(model) -> dict[str, list]:
    mats = [(p, m) for p, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Embedding))]
    col = [(f"{p}.weight", m.weight) for p, m in mats]
    row = [(k, mx.contiguous(w)) for k, w in col]
    head = [(k, w if k.startswith(("lm_head", "model.embed_tokens")) else r)
            for (k, w), (_, r) in zip(col, row)]
    mx.eval([w for _, w in row + head])
    return {"column-major": col, "row-major": row, "row, head column-major": head}


def steps(model, prompt, n: int):
    cache = make_prompt_cache(model)
    mx.eval(model(prompt, cache=cache))
    one, nine, out = [], [], None
    for _ in range(n):
        t = time.perf_counter()
        mx.eval(model(mx.array([[42]]), cache=cache))
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = model(mx.array([[42] * 9]), cache=cache)
        mx.eval(out)
        nine.append(time.perf_counter() - t)
        for c in cache:
            c.trim(10)
    return sorted(one)[n // 2], sorted(nine)[n // 2], out


def batch_step(model, prompt, rows: int, n: int) -> float:
    """The median of ``n`` one-token steps of ``rows`` rows (each after the same prompt)."""
    cache = make_prompt_cache(model)
    mx.eval(model(mx.concatenate([prompt] * rows), cache=cache))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        mx.eval(model(mx.array([[42]] * rows), cache=cache))
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2]


def main(name: str, rows: int) -> None:
    model, tok = load(name)
    prompt = mx.array(tok.encode("The quick brown fox jumps over the lazy dog. " * 12))[None]
    variants, times, ref = layouts(model), {}, None
    for _ in range(4):
        for label, weights in variants.items():
            model.update(tree_unflatten(weights))
            one, nine, out = steps(model, prompt, 12)
            batch = batch_step(model, prompt, rows, 12) if rows else 0.0
            times.setdefault(label, []).append((one, nine, batch))
            ref = out if ref is None else ref
            assert mx.array_equal(ref, out).item(), f"{label}: logits differ"
    for label, ts in times.items():
        one, nine, batch = (sorted(t[i] for t in ts)[len(ts) // 2] * 1000 for i in range(3))
        print(f"{name} {label:24s} 1-token {one:6.1f} ms  9-token {nine:6.1f} ms"
              + (f"  {rows} rows x 1 token {batch:6.1f} ms" if rows else ""))
    print("logits bitwise equal across layouts")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m", int(sys.argv[2]) if len(sys.argv) > 2 else 0)
