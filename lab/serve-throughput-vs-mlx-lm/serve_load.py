"""Measure `specdec serve` beside `mlx_lm.server` from the client side, in one run.

    python lab/serve-throughput-vs-mlx-lm/serve_load.py                        # ours (suffix, plain) and mlx_lm.server
    python lab/serve-throughput-vs-mlx-lm/serve_load.py --peer none            # ours only
    python lab/serve-throughput-vs-mlx-lm/serve_load.py --clients 1,4 --load-max-tokens 16 --max-tokens 32   # quick check
    python lab/serve-throughput-vs-mlx-lm/serve_load.py --workload decode --clients 8,32 --turns off   # decode-heavy
    python lab/serve-throughput-vs-mlx-lm/serve_load.py --workload decode --clients 8,32 --turns off --repeat 3

Both servers load the same directory: the mlx-lm model our loader converts the GGUF of
``--model`` into (float32 safetensors under $SPECDEC_CACHE_DIR); ours runs with
``--dtype float32`` and mlx_lm.server keeps the directory's float32 weights, so both
decode in fp32. Both start with OpenBLAS preloaded (``specdec.backend.preload_env``; the
JSON records whether each process really mapped it). Servers run one at a time, and each
measurement gets a freshly started server (one warm-up request first), so no prompt cache
or suffix history carries over between rows; the three servers are interleaved per row.

Servers: ``ours suffix`` (`specdec serve --draft-type suffix`; ``ours default``, with no
drafter flag, under ``--workload decode``), ``ours plain``
(``--draft-type none``) and ``mlx_lm`` (`mlx_lm.server` with its own batching and prompt
cache, default flags). Every request is a streamed chat completion, greedy, same
``max_tokens``, same prompts.

1. Load: for each N in ``--clients``, N clients start together and each streams
   requests back to back until max(N, 8) requests are done (so one client still gives 8
   samples). ``--workload prompt`` (the default, prompt-heavy): prompts cycle through
   ``specdec.prompts.parity_prompts()`` (150-700 tokens each), ``--load-max-tokens``
   (default 48) new tokens. ``--workload decode`` (decode-heavy): 64 distinct short
   questions (``specdec.prompts.short_questions``, 42-46 prompt tokens with the chat
   template), 128 new tokens unless ``--load-max-tokens`` says otherwise; ours then runs
   with its default flags (``ours default``: grammar,suffix drafting). Reported:
   throughput (completion tokens / wall), p50/p95 end-to-end latency and TTFT, and how
   many outputs equal mlx_lm.server's for the same request.
2. Conversation (``--turns on``): turn 1 is a ~680-token code edit
   (statistics.linear_regression), its reply, then a follow-up re-sending the whole
   conversation. Reported: turn-2 TTFT and end-to-end time (plus the cached prompt tokens
   when the server reports them).
0. (``--single on``, off by default) our drafters alternated on the textwrap code edit
   through one server, as in the README's serve section: suffix (cold), plain, ngram, then
   each again (suffix now warm). Decode tok/s = (tokens - 1) / (last - first token time).
Ratios ours / mlx_lm are printed for every row; with ``--repeat N`` the load rows run N
times (each run all servers side by side, a fresh server per row) and the throughput
ratios of each run and their median are printed too. Prints one JSON object per measurement,
then Markdown tables; ``--out`` writes everything as one JSON file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from specdec.backend import preload_env
from specdec.prompts import code_edit_prompt, parity_prompts, short_questions

RETRIES = 3  # per request, for a connection refused or reset before any reply
MIN_REQUESTS = 8  # per load row: a single client still gives this many samples
TURN1 = ("statistics", "linear_regression",
         "Rename the argument 'proportional' to 'through_origin'.")
TURN2 = "Now add type hints to the function."
HEALTH_WAIT_S = 300


def stream_once(base: str, body: dict) -> dict:
    """One streamed chat request; client-side timings, the text and the final usage. A
    connection refused or reset before any reply (mlx_lm.server's listen backlog is
    socketserver's 5: 32 clients connecting at once on a loaded machine can overflow it)
    is retried, up to RETRIES times, and counted; its time counts in the latency."""
    t0 = time.perf_counter()
    for retry in range(RETRIES + 1):
        try:
            return {**_stream(base, body, t0), "retries": retry}
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as e:
            if getattr(e, "started", False) or retry == RETRIES:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _stream(base: str, body: dict, t0: float) -> dict:
    body = {**body, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0.0}
    first = last = None
    usage, parts = {}, []
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=3600) as r:
        r.raise_for_status()
        try:
            lines = list(_lines(r))
        except httpx.TransportError as e:
            e.started = True  # type: ignore[attr-defined]  (a reply had begun: not retried)
            raise
        for line in lines:
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for c in chunk.get("choices", []):
                if c.get("delta", {}).get("content"):
                    last = line.at
                    first = first or last
                    parts.append(c["delta"]["content"])
    end = time.perf_counter()
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    n = usage.get("completion_tokens", 0)
    return {"latency_s": end - t0, "ttft_s": (first or end) - t0, "text": "".join(parts),
            "completion_tokens": n,
            "decode_tok_s": (n - 1) / (last - first) if first and last > first else 0.0,
            "prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": cached}


class _Line(str):
    """A streamed line and when it arrived (lines are read first, parsed after)."""

    at: float


def _lines(r: httpx.Response):
    for text in r.iter_lines():
        line = _Line(text)
        line.at = time.perf_counter()
        yield line


def single_client(srv: dict, max_tokens: int) -> list[dict]:
    """Our drafters alternated on one prompt, one server (``suffix`` first: every request
    joins the shared history, so an earlier run of the prompt would make it warm)."""
    msgs = [{"role": "user", "content": parity_prompts()["code_textwrap_doc"]}]
    rows = []
    for i, draft in enumerate(["suffix", "none", "ngram", "suffix", "none", "ngram"]):
        r = stream_once(srv["base"], {"model": srv["model_field"], "messages": msgs,
                                      "max_tokens": max_tokens,
                                      "speculative": {"draft_type": draft}})
        r.pop("text")
        r["label"] = {"none": "plain", "ngram": "ngram k=4"}.get(draft) or (
            "suffix (cold)" if i == 0 else "suffix (warm)")
        print(json.dumps(r), flush=True)
        rows.append(r)
    return rows


def _p95(sorted_values: list[float]) -> float:
    return sorted_values[min(len(sorted_values) - 1, round(0.95 * (len(sorted_values) - 1)))]


def load_prompts(workload: str) -> list[str]:
    return list(parity_prompts().values()) if workload == "prompt" else short_questions(64)


def concurrent(srv: dict, clients: int, max_tokens: int, prompts: list[str]) -> dict:
    """``clients`` closed-loop clients share max(clients, MIN_REQUESTS) requests."""
    total = max(clients, MIN_REQUESTS)
    results: dict[int, dict] = {}
    lock = threading.Lock()

    def client(c: int) -> None:
        for i in range(c, total, clients):
            msgs = [{"role": "user", "content": prompts[i % len(prompts)]}]
            r = stream_once(srv["base"], {"model": srv["model_field"], "messages": msgs,
                                          "max_tokens": max_tokens})
            with lock:
                results[i] = r

    cpu0, main0, t0 = cpu_seconds(srv["pid"]), cpu_seconds(srv["pid"], True), time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(srv["pid"]) - cpu0
    main = cpu_seconds(srv["pid"], True) - main0
    if len(results) != total:
        raise SystemExit(f"{srv['label']}: {total - len(results)} of {total} requests failed "
                         "(see the tracebacks above)")
    lat = sorted(r["latency_s"] for r in results.values())
    ttft = sorted(r["ttft_s"] for r in results.values())
    tokens = sum(r["completion_tokens"] for r in results.values())
    out = {"server": srv["label"], "clients": clients, "requests": total, "wall_s": wall,
           "throughput_tok_s": tokens / wall, "completion_tokens": tokens,
           "p50_latency_s": statistics.median(lat), "p95_latency_s": _p95(lat),
           "p50_ttft_s": statistics.median(ttft), "p95_ttft_s": _p95(ttft), "ttfts_s": ttft,
           "server_cpu_s": cpu, "cpu_ms_per_token": 1000 * cpu / max(tokens, 1),
           "main_thread_cpu_ms_per_token": 1000 * main / max(tokens, 1),
           "retries": sum(r["retries"] for r in results.values())}
    print(json.dumps(out), flush=True)
    out["texts"] = [results[i]["text"] for i in range(total)]
    return out


def conversation(srv: dict, max_tokens: int) -> dict:
    """Turn 1 (a long code edit), its reply, then turn 2 re-sending the conversation."""
    msgs = [{"role": "user", "content": code_edit_prompt(*TURN1)}]
    body = {"model": srv["model_field"], "max_tokens": max_tokens}
    t1 = stream_once(srv["base"], {**body, "messages": msgs})
    msgs += [{"role": "assistant", "content": t1["text"]}, {"role": "user", "content": TURN2}]
    t2 = stream_once(srv["base"], {**body, "messages": msgs})
    out = {"server": srv["label"], "turn1_prompt_tokens": t1["prompt_tokens"],
           "turn1_ttft_s": t1["ttft_s"], "turn1_latency_s": t1["latency_s"],
           "turn2_prompt_tokens": t2["prompt_tokens"], "turn2_cached_tokens": t2["cached_tokens"],
           "turn2_ttft_s": t2["ttft_s"], "turn2_latency_s": t2["latency_s"],
           "turn2_completion_tokens": t2["completion_tokens"]}
    print(json.dumps(out), flush=True)
    out["texts"] = [t1["text"], t2["text"]]
    return out


def server_specs(args, model_dir: Path) -> list[dict]:
    """label -> argv (without the port) and the 'model' field its requests send."""
    ours = [sys.executable, "-m", "specdec", "serve", "--model", args.model, "--dtype",
            "float32", "--queue-size", "128", "--log-level", "warning"]
    if args.max_batch is not None:
        ours += ["--max-batch", str(args.max_batch)]
    # decode-heavy: ours as a user starts it (grammar,suffix); prompt-heavy: suffix, as before
    spec = ("ours default", []) if args.workload == "decode" else ("ours suffix", ["--draft-type", "suffix"])
    specs = [{"label": spec[0], "argv": ours + spec[1], "model_field": args.model}]
    if args.plain == "on":
        specs.append({"label": "ours plain", "argv": ours + ["--draft-type", "none"],
                      "model_field": args.model})
    if args.head_tree:  # the same server from another checkout (before / after, one run)
        tree = str(Path(args.head_tree).resolve())
        specs.insert(1, {"label": f"{spec[0]} @{Path(tree).name}", "argv": ours + spec[1],
                         "model_field": args.model, "env": {"PYTHONPATH": tree}})
    if args.one_thread:  # lab/openblas-threads: every forward on one OpenBLAS thread
        specs.insert(1, {"label": f"{spec[0]}, 1 BLAS thread", "argv": ours + spec[1],
                         "model_field": args.model, "env": {"OPENBLAS_NUM_THREADS": "1"}})
    if args.peer == "mlx_lm":
        specs.append(mlx_lm_spec(model_dir))
    return specs


def mlx_lm_spec(model_dir: Path) -> dict:
    """mlx_lm.server on the same float32 directory ours converts the GGUF into."""
    # "default_model" is mlx_lm.server's name for its --model; any other id it would load
    return {"label": "mlx_lm", "model_field": "default_model",
            "argv": [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir),
                     "--log-level", "WARNING"]}


def cpu_seconds(pid: int, main_thread: bool = False) -> float:
    """User + system CPU seconds the process has used so far (/proc/<pid>/stat), all its
    threads (``main_thread``: its main thread's alone, /proc/<pid>/task/<pid>/stat: ours
    runs the asyncio loop there, the inference on another thread): less sensitive to other
    load on the machine than wall time."""
    path = f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _openblas_mapped(pid: int) -> bool | None:
    try:
        return "openblas" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None


@contextlib.contextmanager
def running(spec: dict):
    """Start one server on a free port, wait for /health, warm it up, stop it after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    # the server's output goes to a file (mlx_lm.server logs every request line on stderr);
    # its tail is shown when anything fails while it runs
    log = tempfile.NamedTemporaryFile("w+", prefix="serve_load-", suffix=".log", delete=False)
    env = preload_env({**os.environ, **spec.get("env", {})})
    proc = subprocess.Popen(spec["argv"] + ["--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + HEALTH_WAIT_S
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{spec['label']} exited with {proc.returncode}: "
                                 f"{' '.join(spec['argv'])}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"{spec['label']} was not healthy after {HEALTH_WAIT_S} s")
            time.sleep(0.5)
        srv = {**spec, "base": base, "openblas": _openblas_mapped(proc.pid), "pid": proc.pid}
        stream_once(base, {"model": spec["model_field"], "max_tokens": 8,
                           "messages": [{"role": "user", "content": "Say hi."}]})
        yield srv
    except BaseException:
        print(f"--- {spec['label']} server log, last lines ---\n"
              f"{Path(log.name).read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


def converted_dir(model: str) -> Path:
    """The mlx-lm directory our loader builds (once) from a packaged or GGUF model."""
    from specdec.loader.api import resolve
    from specdec.loader.convert import convert_gguf

    kind, ref = resolve(model)
    if kind == "gguf":
        return convert_gguf(Path(ref))
    if not Path(ref).is_dir():
        raise SystemExit(f"{model!r} is a Hugging Face id; pass a packaged name, a .gguf "
                         "file or a local mlx-lm directory, so both servers load one copy")
    return Path(ref)


def _same(ours: list[str], peer: list[str]) -> str:
    return f"{sum(a == b for a, b in zip(ours, peer))}/{len(peer)}"


def _row_name(r: dict) -> str:
    return f"{r['clients']}" + (f" (run {r['rep'] + 1})" if r.get("reps", 1) > 1 else "")


def load_tables(loads: list[dict]) -> list[str]:
    peer = {(r["clients"], r.get("rep", 0)): r for r in loads if r["server"] == "mlx_lm"}
    lines = ["| clients | server | requests | throughput tok/s | p50 / p95 latency s "
             "| p50 / p95 TTFT s | server CPU ms/token (main thread) | outputs = mlx_lm |",
             "|---|---|---|---|---|---|---|---|"]
    for r in loads:
        p = peer.get((r["clients"], r.get("rep", 0)))
        same = _same(r["texts"], p["texts"]) if p and p is not r else "–"
        lines.append(f"| {_row_name(r)} | {r['server']} | {r['requests']} | "
                     f"{r['throughput_tok_s']:.1f} | {r['p50_latency_s']:.2f} / "
                     f"{r['p95_latency_s']:.2f} | {r['p50_ttft_s']:.2f} / {r['p95_ttft_s']:.2f} "
                     f"| {r.get('cpu_ms_per_token', float('nan')):.1f} "
                     f"({r.get('main_thread_cpu_ms_per_token', float('nan')):.2f}) | {same} |")
    if not peer:
        return lines
    keys = ("throughput_tok_s", "p50_latency_s", "p95_latency_s", "p50_ttft_s", "p95_ttft_s",
            "cpu_ms_per_token")
    lines += ["", "ours / mlx_lm (throughput: higher is better; latency, TTFT, server CPU per "
              "token: lower is better)",
              "", "| clients | server | throughput | p50 latency | p95 latency | p50 TTFT "
              "| p95 TTFT | CPU/token |", "|---|---|---|---|---|---|---|---|"]
    ratios: dict[tuple[int, str], list[float]] = {}
    for r in loads:
        p = peer.get((r["clients"], r.get("rep", 0)))
        if r["server"] != "mlx_lm" and p is not None:
            cells = " | ".join(f"{r[k] / p[k]:.2f}×" if p.get(k) else "–" for k in keys)
            lines.append(f"| {_row_name(r)} | {r['server']} | {cells} |")
            ratios.setdefault((r["clients"], r["server"]), []).append(
                r["throughput_tok_s"] / p["throughput_tok_s"])
    if max(r.get("reps", 1) for r in loads) > 1:
        lines += ["", "throughput ours / mlx_lm over the runs (each run: both servers side by side)",
                  "", "| clients | server | median | each run |", "|---|---|---|---|"]
        lines += [f"| {c} | {srv} | {statistics.median(v):.2f}× | "
                  f"{', '.join(f'{x:.2f}' for x in v)} |" for (c, srv), v in ratios.items()]
    return lines


def single_table(rows: list[dict]) -> list[str]:
    lines = ["| single client, ours | decode tok/s | TTFT s | completion tokens |",
             "|---|---|---|---|"]
    return lines + [f"| {r['label']} | {r['decode_tok_s']:.1f} | {r['ttft_s']:.2f} | "
                    f"{r['completion_tokens']} |" for r in rows]


def turn_table(turns: list[dict]) -> list[str]:
    peer = next((t for t in turns if t["server"] == "mlx_lm"), None)
    lines = ["| conversation | turn-1 TTFT s | turn-2 prompt (cached) tokens | turn-2 TTFT s "
             "| turn-2 end-to-end s | turn-2 tokens | TTFT ÷ mlx_lm | end-to-end ÷ mlx_lm "
             "| replies = mlx_lm |", "|---|---|---|---|---|---|---|---|---|"]
    for t in turns:
        ratio, same = "– | –", "–"
        if peer is not None and t is not peer:
            ratio = (f"{t['turn2_ttft_s'] / peer['turn2_ttft_s']:.2f}× | "
                     f"{t['turn2_latency_s'] / peer['turn2_latency_s']:.2f}×")
            same = _same(t["texts"], peer["texts"])
        cached = "?" if t["turn2_cached_tokens"] is None else t["turn2_cached_tokens"]
        lines.append(f"| {t['server']} | {t['turn1_ttft_s']:.2f} | {t['turn2_prompt_tokens']} "
                     f"({cached}) | {t['turn2_ttft_s']:.2f} | {t['turn2_latency_s']:.2f} | "
                     f"{t['turn2_completion_tokens']} | {ratio} | {same} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="packaged name, .gguf or mlx-lm dir")
    ap.add_argument("--peer", choices=("mlx_lm", "none"), default="mlx_lm",
                    help="also measure mlx_lm.server (default) or only ours")
    ap.add_argument("--clients", default="1,8,32", help="concurrent clients per load row ('' skips)")
    ap.add_argument("--workload", choices=("prompt", "decode"), default="prompt",
                    help="load rows: prompt-heavy (the parity prompts) or decode-heavy "
                         "(short questions, 128 new tokens)")
    ap.add_argument("--load-max-tokens", type=int,
                    help="completion length under load (default 48; 128 with --workload decode)")
    ap.add_argument("--max-tokens", type=int, default=128, help="completion length of each turn")
    ap.add_argument("--turns", choices=("on", "off"), default="on", help="the conversation")
    ap.add_argument("--one-thread", action="store_true",
                    help="also run our default server with OPENBLAS_NUM_THREADS=1 (lab/openblas-threads)")
    ap.add_argument("--max-batch", type=int, help="passed to `specdec serve` only when given")
    ap.add_argument("--head-tree", help="also run our default server from this checkout "
                    "(PYTHONPATH): before and after a change in one interleaved run")
    ap.add_argument("--plain", choices=("on", "off"), default="on",
                    help="also our plain server (--draft-type none)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the load rows this many times (each run: every server side by "
                         "side); ratios per run and their median")
    ap.add_argument("--single", choices=("on", "off"), default="off",
                    help="first, our drafters alternated on one prompt (ours only)")
    ap.add_argument("--out", help="write every measurement as one JSON file")
    args = ap.parse_args()
    if args.load_max_tokens is None:
        args.load_max_tokens = 128 if args.workload == "decode" else 48
    model_dir = converted_dir(args.model)
    specs = server_specs(args, model_dir)
    loads, turns, single, servers = [], [], [], {}
    if args.single == "on":
        with running(specs[0]) as srv:
            servers[srv["label"]] = srv["openblas"]
            single = single_client(srv, args.max_tokens)
    for rep in range(args.repeat):
        for clients in [int(c) for c in args.clients.split(",") if c]:
            for spec in specs:
                with running(spec) as srv:
                    servers[srv["label"]] = srv["openblas"]
                    loads.append({**concurrent(srv, clients, args.load_max_tokens,
                                               load_prompts(args.workload)),
                                  "rep": rep, "reps": args.repeat})
    if args.turns == "on":
        for spec in specs:
            with running(spec) as srv:
                servers[srv["label"]] = srv["openblas"]
                turns.append(conversation(srv, args.max_tokens))
    config = {"model": args.model, "model_dir": str(model_dir), "dtype": "float32",
              "workload": args.workload,
              "load_max_tokens": args.load_max_tokens, "repeat": args.repeat, "turn_max_tokens": args.max_tokens,
              "max_batch": args.max_batch, "head_tree": args.head_tree, "openblas_mapped": servers}
    print(json.dumps({"config": config}))
    if args.out:
        Path(args.out).write_text(json.dumps({"config": config, "single": single, "load": loads,
                                             "turns": turns}, indent=1))
    tables = [single_table(single) if single else [], load_tables(loads) if loads else [],
              turn_table(turns) if turns else []]
    print("\n\n".join("\n".join(t) for t in tables if t))


if __name__ == "__main__":
    main()
