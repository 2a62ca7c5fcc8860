"""cProfile (thread time) of 24 rounds of each of round_cost.py's runners, same process, one after the other.

    python lab/serve-throughput-vs-mlx-lm/round-cost/profile_rounds.py"""
import cProfile, io, pstats, sys, time
sys.argv = ["x", "8", "4", "1", ""]
sys.path.insert(0, __import__("os").path.dirname(__file__))
import round_cost as rc
import specdec
model, tok = specdec.load("smollm2-135m", dtype="float32")
prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
           for q in rc.short_questions(64)[:8]]
runners = {"ours": rc.Ours(model, prompts), "mlx_lm": rc.Theirs(model, prompts)}
for name, r in runners.items():
    rc.timed(r, 4)
for name, r in runners.items():
    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    for _ in range(24):
        r.round()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
    print("=====", name); print(out.getvalue()[-3500:])
