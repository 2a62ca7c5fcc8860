"""Measure `specdec serve` from the client side (the numbers in the README's serve section).

    python scripts/serve_load.py                    # starts its own server (SmolLM2-135M)
    python scripts/serve_load.py --base-url http://127.0.0.1:8080 --model smollm2-135m

1. Single client, one prompt (the textwrap code edit), streamed, alternating drafters in
   one run so the ratios share the machine's conditions: ``suffix`` on the server's first
   sight of the prompt (cold), plain (``draft_type none``), ``ngram`` (prompt lookup,
   stateless), then each again (``suffix`` now warm: the shared history holds the
   earlier answers).
   Decode tok/s = (completion tokens - 1) / (last token time - first token time).
2. Concurrency: 8 and 32 clients start together, each streaming one request; prompts cycle
   through ``specdec.prompts.parity_prompts()`` (all different up to 21 clients). Reported:
   throughput (completion tokens / wall time), requests/s, p50/p95 of the end-to-end latency
   and of the time to first token, per drafter (``--clients ""`` skips this part). The
   shared history is as earlier requests of the run left it.
Prints one JSON object per measurement, then Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx

from specdec.backend import preload_env
from specdec.prompts import parity_prompts


def stream_once(base: str, model: str, prompt: str, max_tokens: int, draft_type: str,
                headers: dict) -> dict:
    """One streamed chat request; client-side timings and the final usage."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "speculative": {"draft_type": draft_type}}
    t0 = time.perf_counter()
    first = last = None
    usage, extra = {}, {}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=headers,
                      timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            extra = chunk.get("specdec", extra)
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                last = time.perf_counter()
                first = first or last
    end = time.perf_counter()
    n = usage.get("completion_tokens", 0)
    decode = (n - 1) / (last - first) if first and last and last > first else 0.0
    return {"draft_type": draft_type, "latency_s": end - t0, "ttft_s": (first or end) - t0,
            "completion_tokens": n, "client_decode_tok_s": decode,
            "server_decode_tok_s": extra.get("decode_tokens_per_s"),
            "acceptance_rate": usage.get("acceptance_rate"),
            "mean_acceptance_length": usage.get("mean_acceptance_length")}


def single_client(args, headers: dict) -> list[dict]:
    prompt = parity_prompts()["code_textwrap_doc"]
    stream_once(args.base_url, args.model, "Say hi.", 8, "none", headers)  # warm-up
    # suffix first: every request joins the shared history, so any earlier run of this
    # prompt (whatever its drafter) would already make it warm
    order = ["suffix", "none", "ngram", "suffix", "none", "ngram"]
    rows = []
    for i, draft in enumerate(order):
        r = stream_once(args.base_url, args.model, prompt, args.max_tokens, draft, headers)
        r["label"] = {"none": "plain", "ngram": "ngram k=4"}.get(draft) or (
            "suffix (cold)" if i == 0 else "suffix (warm)")
        print(json.dumps(r), flush=True)
        rows.append(r)
    return rows


def concurrent(args, headers: dict, clients: int, draft: str) -> dict:
    prompts = list(parity_prompts().values())
    results: list[dict] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        r = stream_once(args.base_url, args.model, prompts[i % len(prompts)],
                        args.load_max_tokens, draft, headers)
        with lock:
            results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(r["latency_s"] for r in results)
    ttft = sorted(r["ttft_s"] for r in results)
    tokens = sum(r["completion_tokens"] for r in results)
    out = {"clients": clients, "draft_type": draft, "completed": len(results), "wall_s": wall,
           "throughput_tok_s": tokens / wall, "requests_per_s": len(results) / wall,
           "p50_latency_s": statistics.median(lat), "p95_latency_s": _p95(lat),
           "p50_ttft_s": statistics.median(ttft), "p95_ttft_s": _p95(ttft),
           "completion_tokens": tokens}
    print(json.dumps(out), flush=True)
    return out


def _p95(sorted_values: list[float]) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(0.95 * (len(sorted_values) - 1)))]


def start_server(args) -> subprocess.Popen:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args.base_url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "specdec", "serve", "--model", args.model,
                             "--port", str(port), "--queue-size", "64", "--log-level", "warning"],
                            env=preload_env(dict(os.environ)))
    for _ in range(600):
        try:
            if httpx.get(args.base_url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not become healthy")


def markdown(single: list[dict], loads: list[dict]) -> str:
    lines = ["| single client | client decode tok/s | server decode tok/s | acceptance | mean acceptance length |",
             "|---|---|---|---|---|"]
    for r in single:
        lines.append(f"| {r['label']} | {r['client_decode_tok_s']:.1f} | {r['server_decode_tok_s']:.1f} | "
                     f"{r['acceptance_rate']:.0%} | {r['mean_acceptance_length']:.2f} |")
    lines += ["", "| clients | drafter | throughput tok/s | req/s | p50 / p95 latency s | p50 / p95 TTFT s |",
              "|---|---|---|---|---|---|"]
    for r in loads:
        lines.append(f"| {r['clients']} | {r['draft_type']} | {r['throughput_tok_s']:.1f} | "
                     f"{r['requests_per_s']:.2f} | {r['p50_latency_s']:.1f} / {r['p95_latency_s']:.1f} | "
                     f"{r['p50_ttft_s']:.1f} / {r['p95_ttft_s']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", help="a running server (default: start one)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--api-key", default=os.environ.get("SPECDEC_API_KEY"))
    ap.add_argument("--max-tokens", type=int, default=128, help="single-client completion length")
    ap.add_argument("--load-max-tokens", type=int, default=48, help="completion length under load")
    ap.add_argument("--clients", default="8,32")
    ap.add_argument("--load-drafters", default="suffix,none")
    args = ap.parse_args()
    proc = None if args.base_url else start_server(args)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        single = single_client(args, headers)
        loads = [concurrent(args, headers, int(c), d) for c in args.clients.split(",") if c
                 for d in args.load_drafters.split(",")]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    print(markdown(single, loads))


if __name__ == "__main__":
    main()
