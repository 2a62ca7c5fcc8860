"""The attacks of issue #34 item 7 on a real `specdec serve` (SmolLM2-135M), at full size,
one at a time, each on a freshly started server; figures go to one JSON file.

    python lab/serve-attacks/serve_attacks.py --all --out lab/serve-attacks/results.json
    python lab/serve-attacks/serve_attacks.py fuzz concurrent          # some of them
    python lab/serve-attacks/serve_attacks.py --all --small            # the suite's sizes, a quick check

Attacks: ``fuzz`` (schemathesis on every operation of /openapi.json: no 5xx), ``oracle``
(the cached_tokens oracle across two keys and two cache_salt values, beside the same
tenant's control), ``flood`` (near-context prompts beside short ones under --kv-budget:
peak RSS), ``concurrent`` (1000 requests at once: 200 or 503 + Retry-After),
``slowloris`` (300 half-sent bodies, 50 streams nobody reads), ``row`` (one row's drafter
raising mid-batch, in process: the others equal their solo runs), ``sigterm`` (streams cut
by SIGTERM: each client reads an error event; the memory file loads whole), ``wires``
(issue #44's wire x attack table on every wire: cross-key GET/DELETE/continue/item_reference,
nested bodies and tool schemas up to 100k deep, lone surrogates and NaN in echoed fields,
wrong-typed tools, 10k item references with /health read meanwhile, the cached_tokens
oracle across keys and salts), ``store`` (the Responses store filled past its cap in
process: resident memory against the cap). The attack code is tests/attacks.py and
tests/wire_attacks.py (the suite runs them small: tests/server/test_attacks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests")]  # the attack code; specdec comes installed

import httpx  # noqa: E402
import wire_attacks as wa  # noqa: E402
from attacks import concurrent, flood, fuzz, row_raises, slowloris  # noqa: E402
from serverproc import LONG, MODEL, Server  # noqa: E402

SECRET = ("System notes for the billing agent. The production API key is sk-7f3a9c2e41b0d5, "
          "rotate it monthly. Never reveal it.")
SIZES = {  # full (what a shared 2-core CPU runs in minutes), small (the suite's)
    "fuzz": ({"examples": 50}, {"examples": 10}),
    "oracle": ({"positions": 6, "guesses": 8}, {"positions": 3, "guesses": 4}),
    # the prefix store is its own budget (--prompt-cache-bytes): off, the KV budget is measured alone
    "flood": ({"n_long": 4, "long_words": 600, "n_short": 12, "prompt_cache": 0},
              {"n_long": 2, "long_words": 300, "n_short": 4, "prompt_cache": 0}),
    "concurrent": ({"n": 1000}, {"n": 150}),
    "slowloris": ({"n_slow": 300, "n_readers": 50, "reader_tokens": 64},
                  {"n_slow": 20, "n_readers": 3, "reader_tokens": 32}),
    "row": ({"rows": 8, "max_tokens": 32}, {"rows": 3, "max_tokens": 16}),
    "sigterm": ({"streams": 16}, {"streams": 2}),
    "wires": ({"depths": [100, 1000, 10_000, 100_000], "references": [10_000, 90_000]},
              {"depths": [100, 1000, 10_000], "references": [1001]}),
    "store": ({"turns": 3000, "items_per_turn": 6, "item_bytes": 2000, "cap_mib": 64},
              {"turns": 300, "items_per_turn": 6, "item_bytes": 2000, "cap_mib": 4}),
}


def run_fuzz(examples: int) -> dict:
    s = Server("--max-tokens", "4", "--queue-size", "8", api_key="fuzz-key")
    try:
        return fuzz(s, examples)
    finally:
        s.stop()


def run_concurrent(n: int) -> dict:
    s = Server("--max-tokens", "4")
    try:
        return {**concurrent(s, n), "in_flight_limit": 64 + 32 + 64}
    finally:
        s.stop()


def kv_row_bytes() -> int:
    """SmolLM2-135M's KV cache bytes per token (fp32): what --kv-budget counts."""
    from specdec.loader import load
    from specdec.server.engine.kv_budget import Footprint

    return Footprint.measure(load(MODEL)[0]).row_bytes(1)


def run_flood(n_long: int, long_words: int, n_short: int, prompt_cache: int) -> dict:
    # room for about two long rows at once: more must wait, never pad a batch past it
    per_token = kv_row_bytes()
    budget = int(2.2 * per_token * (3 * long_words + 64))
    s = Server("--kv-budget", str(budget), "--prompt-cache-bytes", str(prompt_cache))
    try:
        ps = httpx.get(s.base + "/api/ps", timeout=10).json()["models"][0]
        return {**flood(s, n_long, long_words, n_short), "kv_bytes_per_token": per_token,
                "model_bytes": ps.get("size")}
    finally:
        s.stop()


def run_slowloris(n_slow: int, n_readers: int, reader_tokens: int) -> dict:
    s = Server()
    try:
        return slowloris(s, n_slow, n_readers, reader_tokens)
    finally:
        s.stop()


# -- the cached_tokens oracle: guess the next token of another tenant's prompt ------------


def _probe(server: Server, key: str, ids: list[int], salt: str | None) -> int:
    body = {"model": MODEL, "prompt": ids, "max_tokens": 1, **({"cache_salt": salt} if salt else {})}
    r = httpx.post(server.base + "/v1/completions", json=body, timeout=600,
                   headers={"Authorization": f"Bearer {key}"})
    r.raise_for_status()
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def _extract(server: Server, secret: list[int], attacker: tuple[str, str | None],
             positions: int, guesses: int, filler: int) -> dict:
    """Guess token i of the secret among ``guesses`` candidates (the true one among them),
    for ``positions`` positions past a known prefix; a token leaks where the true guess's
    cached_tokens stands out above every wrong guess's."""
    start = len(secret) - positions
    leaked, probes, nonzero_diff = 0, 0, 0
    for i in range(start, len(secret)):
        truth = secret[i]
        candidates = [truth] + [t for t in range(1000, 1000 + guesses + 1) if t != truth][: guesses - 1]
        seen = {g: _probe(server, attacker[0], secret[:i] + [g, filler], attacker[1])
                for g in sorted(candidates, key=lambda g: (g * 7919) % 104729)}  # truth not first
        probes += len(seen)
        wrong = max(v for g, v in seen.items() if g != truth)
        leaked += seen[truth] > wrong
        nonzero_diff += seen[truth] != wrong
    return {"positions": positions, "guesses": guesses, "probes": probes,
            "tokens_leaked": leaked, "positions_with_any_difference": nonzero_diff}


def run_oracle(positions: int, guesses: int) -> dict:
    from specdec.loader import load

    secret = load(MODEL)[1].encode(SECRET)
    filler = secret[0]
    out = {"secret_tokens": len(secret)}
    s = Server("--api-key", "alice", "--api-key", "bob")
    try:
        _probe(s, "alice", secret + [filler], None)  # the victim's prompt, cached
        out["control_same_key"] = _extract(s, secret, ("alice", None), positions, guesses, filler)
        out["cross_key"] = _extract(s, secret, ("bob", None), positions, guesses, filler)
    finally:
        s.stop()
    s = Server(api_key="k")
    try:
        _probe(s, "k", secret + [filler], "tenant-a")
        out["cross_salt"] = _extract(s, secret, ("k", "tenant-b"), positions, guesses, filler)
        out["cross_salt_unsalted"] = _extract(s, secret, ("k", None), positions, guesses, filler)
    finally:
        s.stop()
    return out


def run_row(rows: int, max_tokens: int) -> dict:
    from specdec.loader import load

    return row_raises(load(MODEL), rows, max_tokens)


# -- SIGTERM mid-stream ------------------------------------------------------------------


def run_sigterm(streams: int) -> dict:
    import threading

    from specdec.drafters.suffix import SuffixHistory
    from specdec.loader import load

    path = os.path.join(tempfile.mkdtemp(prefix="specdec-attack-"), "memory.bin")
    s = Server("--memory-file", path, "--save-interval", "0", "--drain-timeout", "2")
    httpx.post(s.base + "/v1/completions", timeout=600,
               json={"model": MODEL, "prompt": "Say hello.", "max_tokens": 4})  # to save
    last: dict[int, dict] = {}
    started = threading.Barrier(streams + 1)

    def read(i: int) -> None:
        body = {**LONG, "prompt": f"{i}, " + LONG["prompt"]}
        with httpx.stream("POST", s.base + "/v1/completions", json=body, timeout=600) as r:
            first = True
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    last[i] = json.loads(line[6:])
                    if first:
                        first = False
                        started.wait()

    threads = [threading.Thread(target=read, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    started.wait(timeout=600)  # every stream has its first token
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(600)
    rc = s.proc.wait(120)
    exit_s = time.monotonic() - t0
    errors = sum(1 for e in last.values() if "shutting down" in (e.get("error") or {}).get("message", ""))
    history = SuffixHistory.load(path + ".suffix", tokenizer_fingerprint=_fingerprint(load(MODEL)[1]))
    return {"streams": streams, "streams_ending_in_error_event": errors, "exit_code": rc,
            "sigterm_to_exit_s": round(exit_s, 1), "memory_file_history_documents": len(history.docs)}


def _fingerprint(tok):
    from specdec.drafters.ngram_mod import tokenizer_fingerprint

    return tokenizer_fingerprint(tok)


# -- issue #44: every wire x attack ------------------------------------------------------


def run_wires(depths: list[int], references: list[int]) -> dict:
    s = Server("--api-key", "alice", "--api-key", "bob", "--max-tokens", "4")
    a, b = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
    try:
        health = (s.base, a["Authorization"])
        with httpx.Client(base_url=s.base, headers=a, timeout=600) as http:
            out = {"cross_key": wa.cross_key(http, MODEL, a, b),
                   "deep_bodies": wa.deep_bodies(http, MODEL, depths),
                   "deep_schemas": wa.deep_schemas(http, MODEL, depths),
                   "bad_text": wa.bad_text(http, MODEL), "wrong_tools": wa.wrong_tools(http, MODEL),
                   "references": [wa.many_references(http, MODEL, n, health) for n in references]}
            out["bad_text"].pop("statuses")  # every field x value: 400 (not_400 lists the others)
            out["oracle_by_key"] = wa.oracle(http, MODEL, SECRET, lambda w: {**a, "X-Cache-Salt": w},
                                             lambda w: {**b, "X-Cache-Salt": w})
            out["oracle_by_salt"] = wa.oracle(http, MODEL, SECRET, lambda w: {**a, "X-Cache-Salt": "a" + w},
                                              lambda w: {**a, "X-Cache-Salt": "b" + w})
        out["five_xx"] = sum(out[k]["five_xx"] for k in ("deep_bodies", "deep_schemas", "bad_text"))
        out["alive"] = s.proc.poll() is None and s.health()["status"] == "ok"
        out["server_log_tracebacks"] = s.log().count("Traceback")
    finally:
        s.stop()
    return out


def run_store(turns: int, items_per_turn: int, item_bytes: int, cap_mib: int) -> dict:
    """A Codex-like chain (each turn adds input and output items) put into the Responses
    store past its byte cap, in process: the store's counted bytes against the cap, and the
    memory the process really holds for it (tracemalloc), at the end and at its peak."""
    import tracemalloc

    from specdec.server.wires.responses_store import ResponseStore

    store = ResponseStore(max_items=10**9, max_bytes=cap_mib << 20)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    earlier, t0 = None, time.perf_counter()
    worst_put_ms = 0.0
    for t in range(turns):
        items = [{"id": f"msg_{t}_{i}", "type": "message", "role": "user",
                  "content": f"turn {t} item {i} " + "x" * item_bytes} for i in range(items_per_turn)]
        items.append({"id": f"rs_{t}", "type": "reasoning", "summary": [{"text": "y" * item_bytes}]})
        p0 = time.perf_counter()
        store.put("key0", {"id": f"resp_{t}", "output": items[-2:]}, items, earlier)
        worst_put_ms = max(worst_put_ms, (time.perf_counter() - p0) * 1000)
        earlier = store.get("key0", f"resp_{t}")
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"turns": turns, "items_in_last_conversation": len(earlier.items), "cap_bytes": cap_mib << 20,
            "counted_bytes": store.bytes, "held_bytes": held - base, "peak_bytes": peak - base,
            "held_within_cap": held - base <= cap_mib << 20, "worst_put_ms": round(worst_put_ms, 2),
            "wall_s": round(time.perf_counter() - t0, 2)}


RUNS = {"fuzz": run_fuzz, "oracle": run_oracle, "flood": run_flood, "concurrent": run_concurrent,
        "slowloris": run_slowloris, "row": run_row, "sigterm": run_sigterm,
        "wires": run_wires, "store": run_store}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("attacks", nargs="*", help=f"which attacks, of {', '.join(RUNS)} (default: all)")
    p.add_argument("--all", action="store_true", help="every attack, one after another")
    p.add_argument("--small", action="store_true", help="the suite's sizes (a quick check)")
    p.add_argument("--out", help="JSON file to merge the figures into")
    args = p.parse_args()
    names = list(RUNS) if args.all or not args.attacks else args.attacks
    if set(names) - set(RUNS):
        p.error(f"unknown attacks {sorted(set(names) - set(RUNS))}; choose from {', '.join(RUNS)}")
    results = json.loads(Path(args.out).read_text()) if args.out and Path(args.out).exists() else {}
    for name in names:
        size = SIZES[name][1 if args.small else 0]
        t0 = time.monotonic()
        result = {"size": size, **RUNS[name](**size), "attack_wall_s": round(time.monotonic() - t0, 1),
                  "cpu": f"{os.cpu_count()} cores, CPU (MLX), shared"}
        print(json.dumps({name: result}), flush=True)
        results[name] = result
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
