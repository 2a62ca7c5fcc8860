"""Each request's TTFT in a burst of N short questions against real servers (a fresh one
per burst, warmed up as serve_load's): whether the burst's first tokens come together
(one step) or the first job's early and the rest a prefill and steps later.

    python lab/serve-throughput-vs-mlx-lm/first-token/ttft_spread.py 8 3 [HEAD_CHECKOUT]
    python lab/serve-throughput-vs-mlx-lm/first-token/ttft_spread.py 8 1 timeline   # our server's phases

``timeline``: our default server only, run through ``served_timeline.py``; each burst's
server-side timeline goes to served-timeline-<burst>.txt here."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from serve_load import concurrent, converted_dir, mlx_lm_spec, running, server_specs  # noqa: E402

from specdec.prompts import short_questions  # noqa: E402


def main() -> None:
    n, bursts, extra = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None
    args = argparse.Namespace(model="smollm2-135m", max_batch=None, workload="decode", plain="off",
                              head_tree=extra if extra not in (None, "timeline") else None, peer="none")
    specs = server_specs(args, converted_dir(args.model)) + [mlx_lm_spec(converted_dir(args.model))]
    if extra == "timeline":
        here = Path(__file__).resolve().parent
        ours = specs[0]
        specs = [{**ours, "argv": [ours["argv"][0], str(here / "served_timeline.py"), *ours["argv"][3:]]}]
    for b in range(bursts):
        for spec in specs:
            if extra == "timeline":
                spec["env"] = {"TIMELINE_OUT": str(Path(__file__).resolve().parent / f"served-timeline-{b}.txt")}
            with running(spec) as srv:
                r = concurrent(srv, n, 4, short_questions(64))
            print(f"burst {b} {spec['label']:22s} TTFTs s: {' '.join(f'{t:.2f}' for t in r['ttfts_s'])}",
                  flush=True)


if __name__ == "__main__":
    main()
