#!/bin/sh
# The final decode-heavy comparison of issue #46 item 3, in one command, on a quiet machine
# (~12 minutes: 3 servers x 8 and 32 clients x 2 runs, a fresh server per row, interleaved):
#   sh lab/serve-throughput-vs-mlx-lm/probe-one-row/compare.sh [OUT.json] [HEAD_CHECKOUT]
# OUT.json defaults to lab/serve-throughput-vs-mlx-lm/probe-one-row/quiet.json; HEAD_CHECKOUT
# (another checkout, e.g. `git worktree add ../base 16a3ff5`) adds its default server to the
# same run (+4 rows, ~4 minutes). Prints the tables: throughput ours / mlx_lm per run and
# their median, and each server's CPU ms per generated token (main thread in brackets).
set -e
cd "$(dirname "$0")/../../.."
OUT=${1:-lab/serve-throughput-vs-mlx-lm/probe-one-row/quiet.json}
HEAD=${2:+--head-tree $2}
uptime  # a load average above ~1.5 makes the wall ratios noise: re-run later
python3 lab/serve-throughput-vs-mlx-lm/serve_load.py --workload decode --clients 8,32 --turns off \
    --repeat 2 $HEAD --out "$OUT"
uptime
