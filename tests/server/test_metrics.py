"""The server's Prometheus metrics (``specdec.server.http.metrics``): what the hooks count reads
back from ``render()``, the acceptance rate, the gauges a server watches, and one registry
per server."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from specdec.server.http.metrics import Metrics


def samples(m):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples}


def usage(prompt, cached, drafted, accepted):
    return {"prompt_tokens": prompt, "prompt_tokens_details": {"cached_tokens": cached},
            "drafted_tokens": drafted, "accepted_tokens": accepted}


def test_hooks_read_back_from_the_rendered_text():
    m = Metrics()
    m.on_request("chat", 200)
    m.on_request("chat", 200)
    m.on_request("chat", 400)
    m.on_token(True, 0.3)
    m.on_token(False, 0.02)
    m.on_done(usage(10, 4, 8, 6))
    m.on_done(usage(5, 0, 2, 0))
    m.on_cancel()
    m.on_save(False)
    s = samples(m)
    assert s[("specdec_requests_total", (("endpoint", "chat"), ("status", "200")))] == 2
    assert s[("specdec_requests_total", (("endpoint", "chat"), ("status", "400")))] == 1
    assert s[("specdec_generated_tokens_total", ())] == 2
    assert s[("specdec_prompt_tokens_total", ())] == 15
    assert s[("specdec_cached_prompt_tokens_total", ())] == 4
    assert s[("specdec_acceptance_rate", ())] == 0.6
    assert s[("specdec_time_to_first_token_seconds_count", ())] == 1
    assert s[("specdec_time_to_first_token_seconds_bucket", (("le", "0.25"),))] == 0
    assert s[("specdec_time_to_first_token_seconds_bucket", (("le", "0.5"),))] == 1
    assert s[("specdec_time_per_output_token_seconds_sum", ())] == 0.02
    assert s[("specdec_requests_cancelled_total", ())] == 1
    assert s[("specdec_memory_saves_total", (("result", "error"),))] == 1


def test_gauges_and_separate_registries():
    a, b = Metrics(), Metrics()
    assert samples(a)[("specdec_acceptance_rate", ())] == 0.0  # nothing drafted yet
    a.watch(lambda: 3, lambda: 2, lambda: 1024, lambda: 4096)
    s = samples(a)
    assert (s[("specdec_queue_depth", ())], s[("specdec_requests_running", ())]) == (3, 2)
    assert s[("specdec_kv_reserved_bytes", ())] == 1024
    assert s[("specdec_kv_budget_bytes", ())] == 4096
    assert samples(b)[("specdec_queue_depth", ())] == 0
