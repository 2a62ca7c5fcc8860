"""`specdec serve` with the batcher's phases timed (``timeline.instrument``), plus when each
request reached ``Admission.queue`` and the job queue: the timeline of a real server's burst,
rewritten to $TIMELINE_OUT every 0.5 s (the server may exit without atexit). Run through ``ttft_spread.py --timeline``.

    TIMELINE_OUT=t.txt python lab/serve-throughput-vs-mlx-lm/first-token/served_timeline.py serve --model ..."""

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ARGV, sys.argv = sys.argv, sys.argv[:1]  # timeline reads its own arguments at import
import timeline  # noqa: E402

sys.argv, timeline.FINE = ARGV, True

from specdec.cli import main  # noqa: E402
from specdec.server.engine import admission, events  # noqa: E402


def instrument_http() -> None:
    queue, put = admission.Admission.queue, events.JobQueue.put_nowait

    async def timed_queue(self, request, spec):
        timeline.note("request in Admission.queue")
        return await queue(self, request, spec)

    def timed_put(self, job):
        ok = put(self, job)
        timeline.note(f"job queued ({len(self)} waiting)")
        return ok
    admission.Admission.queue, events.JobQueue.put_nowait = timed_queue, timed_put


def dump() -> None:
    t0 = next((t for t, what in timeline.LOG if what.startswith("request")), 0.0)
    with open(os.environ.get("TIMELINE_OUT", "served-timeline.txt"), "w") as f:
        for t, what in timeline.LOG:
            f.write(f"{1000 * (t - t0):8.0f} ms  {what}\n")


if __name__ == "__main__":
    timeline.instrument()
    instrument_http()
    threading.Thread(target=lambda: [time.sleep(0.5) or dump() for _ in iter(int, 1)], daemon=True).start()
    sys.exit(main(sys.argv[1:]))
