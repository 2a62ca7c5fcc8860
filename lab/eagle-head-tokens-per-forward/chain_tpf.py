"""Tokens per forward per category and accepted/drafted by draft position per config, and mismatches against plain, from bench records.jsonl files (usage: python3 chain_tpf.py DIR/records.jsonl ...)."""
import json, sys
from collections import defaultdict
emit, steps, mism = defaultdict(int), defaultdict(int), []
dr, ac = defaultdict(lambda: defaultdict(int)), defaultdict(lambda: defaultdict(int))
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if "records" not in r: continue
        plain = {(x["run"], x["turn"]): x["tokens"] for x in r["records"] if x["config"] == "plain"}
        for x in r["records"]:
            c = x["config"]
            if c != "plain" and plain.get((x["run"], x["turn"])) is not None and x["tokens"] != plain[(x["run"], x["turn"])]:
                mism.append((r["case"], c, x["turn"]))
            for key in (x["cls"], "overall"):
                emit[c, key] += x["emitted"]; steps[c, key] += x["verify_steps"]
            for i, (d, a) in enumerate(zip(x["drafted_by_position"], x["accepted_by_position"])):
                dr[c][i + 1] += d; ac[c][i + 1] += a
configs = sorted({c for c, _ in emit}); cats = []
for c, k in emit:
    if k not in cats and k != "overall": cats.append(k)
cats.append("overall")
print("| config | " + " | ".join(cats) + " |"); print("|---" * (len(cats) + 1) + "|")
for c in configs:
    print(f"| {c} | " + " | ".join(f"{emit[c,k]/steps[c,k]:.2f}" if steps[c,k] else "" for k in cats) + " |")
print()
for c in configs:
    if dr[c]:
        print(c, " ".join(f"p{i}:{ac[c][i]}/{dr[c][i]}" for i in sorted(dr[c])), "total", sum(ac[c].values()), "/", sum(dr[c].values()))
print("mismatches:", mism)
