#!/usr/bin/env bash
# Live tokens per target forward of a head vs plain decoding on 3 Spec-Bench questions
# (mt_bench 121, qa 361, math_reasoning 441: the first of each in specbench.stratified(.., 1)),
# SmolLM2-135M, fp32 CPU, greedy, 128 tokens, k = 5, ungated. Prints one JSON line per question.
# Usage: lab/eagle-head-tokens-per-forward/live_check.sh HEAD_DIR
set -euo pipefail
head_dir=$1
out=$(mktemp -d)
python3 - "$out" <<'PY'
import sys
from specdec.bench import specbench as sb
pick = {q.category: q for q in sb.stratified(sb.questions(), 1)}
for c in ("mt_bench", "qa", "math_reasoning"):
    open(f"{sys.argv[1]}/{c}.txt", "w").write(pick[c].turns[0])
PY
for c in mt_bench qa math_reasoning; do
  python3 -m specdec generate --model smollm2-135m --draft-type eagle --draft-model "$head_dir" \
    --no-gate --num-draft-tokens 5 --compare --json -m 128 --prompt-file "$out/$c.txt" 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); s=d['stats']; print(json.dumps({'q': '$c',
      'identical': d['parity'], 'tokens': s['generated_tokens'], 'tokens_per_forward': round(s['tokens_per_forward'], 3),
      'accepted_by_position': s['accepted_by_position'], 'drafted_by_position': s['drafted_by_position']}))"
done
