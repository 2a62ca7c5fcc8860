"""Structured output on a real model: validity, exactness and speed of JSON-schema answers.

For each of N varied extraction prompts (real package metadata: pick one record, return it
under a schema), greedy and sampled (T = 1), it runs plain constrained decoding and
speculative constrained decoding (``--draft-type``, default ``grammar,suffix``) and
reports: how many answers parse and validate against the schema, whether greedy
speculative tokens equal plain constrained tokens, the decode speedup (each pair measured
back to back in one process), and what the grammar costs plain decoding per token
(constrained vs unconstrained plain decoding of the same prompts, alternated).

    python lab/structured-output/structured_check.py --model qwen2.5-coder-0.5b --n 100 --max-tokens 96

``--server URL`` checks validity through a running ``specdec serve`` instead: the N
prompts greedy and sampled (T = 1, seed i) as concurrent chat requests with the schema as
``response_format`` (the batcher serves them together), each answer parsed and validated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

import specdec
from specdec.drafters import DraftSpec
from specdec.prompts import json_records

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "version", "topic", "python_related"],
          "properties": {"name": {"type": "string", "maxLength": 60},
                         "version": {"type": "string", "maxLength": 20},
                         "topic": {"type": "string", "maxLength": 80},
                         "python_related": {"type": "boolean"}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "package", "schema": SCHEMA}}


def valid(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    props = SCHEMA["properties"]
    return (isinstance(value, dict) and set(value) == set(props)
            and all(isinstance(value[k], str) and len(value[k]) <= props[k]["maxLength"]
                    for k in ("name", "version", "topic"))
            and isinstance(value["python_related"], bool))


def prompts(n: int) -> list[list[dict]]:
    recs = json_records(max(n, 8))
    rng = random.Random(0)
    out = []
    for i in range(n):
        group = rng.sample(recs, 4)
        pick = group[i % 4]
        out.append([{"role": "user", "content": "Packages:\n" + json.dumps(group, indent=1)
                     + f"\n\nReturn the record of {pick['name']} as JSON with its name, version, "
                     "a short topic and whether it is Python-related."}])
    return out


def run(model, tok, msgs, drafter, temp, seed, max_tokens, fmt=FORMAT):
    r = specdec.generate(model, tok, msgs, drafter=drafter, max_tokens=max_tokens,
                         response_format=fmt, temperature=temp, seed=seed)
    return r


async def check_server(url: str, model: str, n: int, max_tokens: int) -> dict:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url.rstrip("/") + "/v1", api_key="unused", timeout=3600)
    gate = asyncio.Semaphore(16)

    async def one(i: int, msgs: list[dict], temp: float) -> tuple[bool, str]:
        async with gate:
            r = await client.chat.completions.create(
                model=model, messages=msgs, response_format=FORMAT, max_tokens=max_tokens,
                temperature=temp, seed=i if temp else None)
        c = r.choices[0]
        return valid(c.message.content or "") and c.finish_reason == "stop", c.message.content

    jobs = [one(i, m, t) for t in (0.0, 1.0) for i, m in enumerate(prompts(n))]
    t0 = time.perf_counter()
    got = await asyncio.gather(*jobs)
    bad = [text for ok, text in got if not ok]
    return {"valid_greedy": sum(ok for ok, _ in got[:n]), "valid_sampled": sum(ok for ok, _ in got[n:]),
            "n": n, "invalid": bad[:5], "seconds": round(time.perf_counter() - t0, 1),
            "model": model, "server": url, "when": time.ctime()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--draft-type", default="grammar,suffix")
    ap.add_argument("--server", help="check through this running specdec serve (its URL)")
    args = ap.parse_args()
    if args.server:
        print(json.dumps(asyncio.run(check_server(args.server, args.model, args.n, args.max_tokens))))
        return
    model, tok = specdec.load(args.model)
    spec = DraftSpec(args.draft_type)
    counts = {"valid_greedy": 0, "valid_sampled": 0, "identical": 0, "finished": 0}
    speedups, overhead = [], []
    for i, msgs in enumerate(prompts(args.n)):
        plain = run(model, tok, msgs, None, 0.0, None, args.max_tokens)
        fast = run(model, tok, msgs, spec, 0.0, None, args.max_tokens)
        free = run(model, tok, msgs, None, 0.0, None, args.max_tokens, fmt=None)
        sampled = run(model, tok, msgs, spec, 1.0, i, args.max_tokens)
        counts["valid_greedy"] += valid(fast.text)
        counts["valid_sampled"] += valid(sampled.text)
        counts["identical"] += fast.tokens == plain.tokens
        counts["finished"] += plain.finish_reason == "stop"
        speedups.append(fast.stats.decode_tokens_per_s / plain.stats.decode_tokens_per_s)
        overhead.append(free.stats.decode_tokens_per_s / plain.stats.decode_tokens_per_s)
        print(f"{i:3d} {plain.finish_reason:6s} {'=' if fast.tokens == plain.tokens else 'DIFF'} "
              f"speedup {speedups[-1]:.2f}x  grammar cost {overhead[-1]:.3f}x  "
              f"accepted {fast.stats.accepted}/{fast.stats.drafted}  {fast.text[:70]!r}", flush=True)
    geo = lambda xs: statistics.geometric_mean(xs)  # noqa: E731
    print(json.dumps({**counts, "n": args.n, "speedup_geomean": round(geo(speedups), 3),
                      "constrained_cost_per_token_geomean": round(geo(overhead), 3),
                      "model": args.model, "draft_type": args.draft_type, "when": time.ctime()}))


if __name__ == "__main__":
    main()
