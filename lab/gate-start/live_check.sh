#!/bin/sh
# Issue #46's live check of the default (carried offers + priced start) on a quiet machine, from a
# clone's root: Spec-Bench --quick, 1 warm-up + 3 interleaved runs (medians), SmolLM2-135M then
# Qwen2.5-Coder-0.5B (~16 min and ~1.5-2 h here), each followed by the bar (default >= ungated per
# category, no question < 0.97x plain, tokens per forward >= 1.0) and the short answers' step strings.
#   sh lab/gate-start/live_check.sh [OUT]   (default OUT: /tmp/gate-start-live)
set -e
OUT=${1:-/tmp/gate-start-live}
export PYTHONPATH=$(pwd)
export LD_PRELOAD=$(python3 -c 'from specdec.backend import openblas_path; print(openblas_path() or "")')
python3 -m specdec bench --profile specbench --quick --runs 3 --out "$OUT/smollm2"
python3 lab/gate-start/bar.py "$OUT/smollm2/results.json" --show translation-181 --show summarization-261 --show rag-541
python3 -m specdec bench --profile specbench --quick --runs 3 --model qwen2.5-coder-0.5b --out "$OUT/qwen05"
python3 lab/gate-start/bar.py "$OUT/qwen05/results.json" --show translation-181 --show translation-221 --show rag-521
