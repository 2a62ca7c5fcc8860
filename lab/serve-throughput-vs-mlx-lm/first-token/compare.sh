#!/bin/sh
# The final decode-heavy comparison of issue #46 item 3 in one command, on a quiet machine
# (~5 minutes: ours default, ours plain and mlx_lm.server x 8 and 32 clients x 2 runs,
# interleaved, a fresh server per row; ~6.5 with HEAD_CHECKOUT):
#   sh lab/serve-throughput-vs-mlx-lm/first-token/compare.sh [OUT.json] [HEAD_CHECKOUT]
# OUT.json defaults to lab/serve-throughput-vs-mlx-lm/first-token/quiet.json; HEAD_CHECKOUT
# (another checkout, e.g. `git worktree add ../base 2e54c4d`) adds its default server to the
# same run. Prints per row throughput, p50/p95 latency and TTFT, each server's CPU ms per
# generated token (main thread in brackets), then ours / mlx_lm per run and the median.
# The bar: "ours default" >= 1.00x mlx_lm.server's throughput at 8 and at 32 clients.
set -e
cd "$(dirname "$0")/../../.."
OUT=${1:-lab/serve-throughput-vs-mlx-lm/first-token/quiet.json}
HEAD=${2:+--head-tree $2}
uptime  # a load average above ~1.5 makes the wall ratios noise: re-run later
python3 lab/serve-throughput-vs-mlx-lm/serve_load.py --workload decode --clients 8,32 --turns off \
    --repeat 2 $HEAD --out "$OUT"
uptime
