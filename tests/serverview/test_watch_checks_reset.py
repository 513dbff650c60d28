"""ServerWatch's sampling, the client-vs-server checks and the cache reset, against a real loopback server."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

from loadgen.analysis.coverage import not_comparable
from loadgen.serverview.checks import ClientView, Ended, add_checks, ended_between, ended_inside
from loadgen.serverview.page import parse
from loadgen.serverview.reset import reset_cache
from loadgen.serverview.summary import window_summary
from loadgen.serverview.watch import ServerWatch, running_cap

PAGE = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} %d
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 0.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.0
"""


def test_the_watch_samples_between_the_edges_and_summarises_the_gauges(served) -> None:
    served.pages = [PAGE % (4, 0, 100)] + [PAGE % (r, q, 100 + 10 * i) for i, (r, q) in enumerate(
        [(8, 2), (8, 3), (6, 0), (8, 1)] * 5, 1)]
    w = ServerWatch(served.url, interval_s=0.1)
    w.open()
    time.sleep(0.45)
    block = w.close()
    gets = served.gets
    time.sleep(0.3)
    assert served.gets == gets  # sampling stopped at the close
    assert block["available"] and block["engine"] == "vllm"
    taken = block["samples"]["taken"]
    assert 3 <= taken <= 5 and gets == taken + 2  # the edges plus one page per interval, no more
    running = block["gauges"]["running"]
    assert running["n"] == taken + 2 and running["max"] == 8 and running["min"] == 4
    assert block["output_tokens"] == 10 * (taken + 1)
    assert block["latency"]["ttft"] == {"name": "vllm:time_to_first_token_seconds", "count": 0}
    assert w.span_ns is not None and w.span_ns[1] - w.span_ns[0] >= 0.4e9


def test_edges_only_with_interval_zero_and_a_server_without_metrics(served) -> None:
    served.body = PAGE % (1, 0, 5)
    w = ServerWatch(served.url, interval_s=0)
    w.open()
    time.sleep(0.2)
    assert w.close()["samples"] == {"every_s": 0, "taken": 0, "failed": 0} and served.gets == 2
    served.status, served.body = 404, "no"
    w = ServerWatch(served.url, interval_s=0.05)
    w.open()  # no engine known: nothing to sample
    time.sleep(0.2)
    block = w.close()
    assert served.gets == 4 and not block["available"] and "HTTP 404" in block["reason"]


def test_a_failing_sample_is_counted_and_noted(served) -> None:
    served.pages = [PAGE % (1, 0, 5), PAGE % (1, 0, 6)]
    w = ServerWatch(served.url, interval_s=0.1, timeout_s=0.05)
    w.open()
    served.delay_s = 0.2  # every sample now times out
    time.sleep(0.5)
    served.delay_s = 0.0
    block = w.close()
    assert block["available"] and block["samples"]["failed"] >= 1 and block["samples"]["taken"] == 0
    assert any("no answer in 0.05 s" in n for n in block["notes"])


def test_a_watch_travels_to_a_worker_process_as_settings_only(served) -> None:
    served.body = PAGE % (1, 0, 5)
    w = ServerWatch(served.url, 2.0, headers={"X": "y"}, max_running=48)
    w.open()
    copy = pickle.loads(pickle.dumps(w))
    w.close()
    assert (copy.base_url, copy.interval_s, copy.headers, copy.max_running) == (served.url, 2.0, {"X": "y"}, 48)
    assert copy._before is None and copy._thread is None


def test_running_cap_from_the_probe() -> None:
    assert running_cap({"server_info": {"max_running_requests": 48}}) == 48
    assert running_cap({"server_info": {"total_slots": 256}}) == 256
    assert running_cap({"server_info": {"internal_states": [{"max_running_requests": 7}]}}) == 7
    assert running_cap({"server_info": {}}) is None and running_cap(None) is None


# --- the checks -----------------------------------------------------------------------------------

LLAMA = """llamacpp:tokens_predicted_total %d
llamacpp:spec_decode_num_drafts_total %d
llamacpp:spec_decode_num_draft_tokens_total %d
llamacpp:spec_decode_num_accepted_tokens_total %d
llamacpp:requests_processing %d
llamacpp:requests_deferred 0
"""


def _llama_block(tokens: int, drafts: int, drafted: int, accepted: int, running: tuple[int, ...]) -> dict:
    snaps = [parse(LLAMA % (0, 0, 0, 0, running[0]), "u", 0)]
    snaps += [parse(LLAMA % (0, 0, 0, 0, r), "u", i + 1) for i, r in enumerate(running[1:-1])]
    snaps.append(parse(LLAMA % (tokens, drafts, drafted, accepted, running[-1]), "u", len(running)))
    return window_summary(snaps[0], snaps[-1], snaps[1:-1])


def test_request_end_counts_compare_with_the_requests_that_ended() -> None:
    ended = Ended()
    ended.add(40, None, 21, 39)
    ended.add(60, None, 30, 50)
    block = add_checks(_llama_block(100, 7, 89, 51, (4, 4, 4, 4)), ClientView(4, 1, ended, max_running=4))
    c = block["checks"]
    assert c["tokens"]["verdict"] == "agree" and c["tokens"]["diff_pct"] == 0.0
    assert c["acceptance"]["verdict"] == "equal" and c["acceptance"]["client_accept_rate"] == round(51 / 89, 4)
    assert c["running"]["verdict"] == "runs C"
    assert block["notes"] == []
    # one token off in 100 is 1 %: still agreement; two is not, and says so
    ended2 = Ended()
    ended2.add(98, None, 51, 89)
    block = add_checks(_llama_block(100, 7, 89, 51, (4, 4)), ClientView(4, 1, ended2))
    assert block["checks"]["tokens"]["verdict"] == "disagree"
    assert "100 generated tokens" in block["notes"][0] and "-2.00 %" in block["notes"][0]


def test_a_request_counted_before_the_closing_scrape_and_closed_after_it_may_be_counted() -> None:
    """A server counts a request between its last token's arrival and its stream's close; the rows give
    both. Requests of 24 tokens, scrapes answered at 100 and 200 (edges ns), no loop lag: the third
    request's last token came at 199 and its stream closed at 230, so the server may have counted it
    (279 = 255 + 24 agrees); the fourth's last token came at 210, after the read: it cannot have."""
    rows = [(150, 231, None, None, None, 140), (160, 24, None, None, None, 155),
            (230, 24, None, None, None, 199), (260, 24, None, None, None, 210)]
    edges = ((90, 100), (200, 205))
    assert ended_between(rows, 100, 202).output_tokens == 255
    narrow = ended_inside(rows, edges[0][1], edges[1][0], surely=True)
    wide = ended_inside(rows, edges[0][0], edges[1][1], surely=False)
    assert (narrow.output_tokens, wide.output_tokens) == (255, 279)
    for server, verdict in ((279, "agree"), (303, "disagree")):
        view = ClientView(2, 1, ended_between(rows, 100, 202), ended_narrow=narrow, ended_wide=wide)
        t = add_checks(_llama_block(server, 7, 89, 51, (2, 2, 2)), view)["checks"]["tokens"]
        assert t["verdict"] == verdict and t["client_range"] == [255, 279], t
    # a row without its last token's time (the Locust workers' rows) is placed by its close alone
    assert ended_inside([r[:5] for r in rows], 90, 205, surely=False).output_tokens == 255


def test_acceptance_that_differs_is_a_note() -> None:
    ended = Ended()
    ended.add(100, None, 40, 89)
    block = add_checks(_llama_block(100, 7, 89, 51, (4, 4)), ClientView(4, 1, ended))
    assert block["checks"]["acceptance"]["verdict"] == "differ"
    assert any("accepted_tokens 40 vs 51" in n for n in block["notes"])


def test_the_running_batch_below_c_capped_and_above() -> None:
    ended = Ended()
    below = add_checks(_llama_block(0, 0, 0, 0, (5, 6, 5, 6)), ClientView(16, 1, ended))
    assert below["checks"]["running"]["verdict"] == "below C"
    assert any("ran a median of 5.5 requests" in n and "kept 16 open" in n for n in below["notes"])
    capped = add_checks(_llama_block(0, 0, 0, 0, (8, 8, 8)), ClientView(16, 1, ended, max_running=8))
    assert capped["checks"]["running"]["verdict"] == "capped" and "its cap of 8" in capped["notes"][0]
    above = add_checks(_llama_block(0, 0, 0, 0, (4, 12, 4)), ClientView(4, 1, ended))
    assert above["checks"]["running"]["verdict"] == "above C"
    # the opening and closing scrapes alone (a 0.2 s count window at C=2 on a busy host read 1 and 0) do not
    # judge the load: no note, and the stage stays comparable; a third reading makes the median a judgement
    edges = add_checks(_llama_block(0, 0, 0, 0, (1, 0)), ClientView(2, 1, ended))
    assert edges["checks"]["running"]["verdict"] == "too few readings" and edges["notes"] == []
    assert not_comparable({"concurrency": 2, "server": edges}) == ""
    three = add_checks(_llama_block(0, 0, 0, 0, (0, 0, 1)), ClientView(2, 1, ended))
    assert three["checks"]["running"]["verdict"] == "below C"
    assert "median of 0 of its 2" in not_comparable({"concurrency": 2, "server": three})
    two_above = add_checks(_llama_block(0, 0, 0, 0, (2, 9)), ClientView(2, 1, ended))
    assert two_above["checks"]["running"]["verdict"] == "above C"


def test_per_step_counts_compare_with_the_tokens_received_between_the_scrapes() -> None:
    a = parse(PAGE % (4, 0, 1000), "u", 0)
    b = parse(PAGE % (4, 0, 1990), "u", 2)
    view = ClientView(4, 1, Ended(), tokens_open=(500, 510), tokens_close=(1490, 1502))
    c = add_checks(window_summary(a, b), view)["checks"]
    # 1496 - 505 = 991 received against 990 counted, ± (10 + 12) / 2 that arrived while the scrapes ran
    assert c["tokens"]["verdict"] == "agree" and c["tokens"]["client"] == 991 and c["tokens"]["slack_tokens"] == 11
    assert c["acceptance"]["verdict"] == "not comparable"
    multi = add_checks(window_summary(a, b), ClientView(8, 2, Ended(), (1, 1), (2, 2)))["checks"]["tokens"]
    assert multi["verdict"] == "not comparable" and "2 processes" in multi["why"]


def test_a_per_step_servers_accepted_drafts_against_the_tokens_past_each_events_first() -> None:
    """The real vLLM pages around one 40-token request (tests/serverview/pages/): 31 accepted counted where the
    stream's events carried 27 past their first (40 tokens in 13 events); up to K=4 more per request that
    ended between the scrapes is the server counting drafts cut at max_tokens."""
    pages = Path(__file__).parent / "pages"
    block = window_summary(parse((pages / "vllm_cpu_0.32.0_ngram4_start.txt").read_text(), "u", 0),
                           parse((pages / "vllm_cpu_0.32.0_ngram4_after.txt").read_text(), "u", 10**9))
    one = Ended()
    one.add(40, None, None, None)

    def check(past_first_close: int, ended: Ended) -> dict:
        view = ClientView(1, 1, ended, tokens_open=(0, 0), tokens_close=(40, 40), past_first_open=(0, 0),
                          past_first_close=(past_first_close, past_first_close))
        return add_checks(dict(block), view)["checks"]["acceptance"]

    a = check(27, one)
    assert a["verdict"] == "equal" and a["counts"]["accepted_tokens"]["client"] == 27, a
    assert "up to 4 for each of the 1 requests" in a["why"]
    assert check(27, Ended())["verdict"] == "differ"  # no request ended: nothing was cut
    assert check(20, one)["verdict"] == "differ"  # 11 more than the stream: beyond one request's cut
    assert check(32, one)["verdict"] == "differ"  # the server never counts fewer than the stream carried
    no_count = add_checks(dict(block), ClientView(1, 1, one, tokens_open=(0, 0), tokens_close=(40, 40)))
    assert no_count["checks"]["acceptance"]["verdict"] == "not comparable"


def test_a_per_step_servers_acceptance_per_position_against_the_events_that_reached_it() -> None:
    """The same request per position: its events (1, 5, 3, 1, 1, 1, 5, 5, 2, 5, 5, 5, 1 tokens) reached
    positions 1-4 in 8 / 7 / 6 / 6 of them; the counters took 9 / 8 / 7 / 7, the last step's drafts cut at
    max_tokens one more at each (its event carried 1 token: all four cut)."""
    pages = Path(__file__).parent / "pages"
    block = window_summary(parse((pages / "vllm_cpu_0.32.0_ngram4_start.txt").read_text(), "u", 0),
                           parse((pages / "vllm_cpu_0.32.0_ngram4_after.txt").read_text(), "u", 10**9))
    assert block["accepted_per_position"] == [9, 8, 7, 7]
    one = Ended()
    one.add(40, None, None, None)
    zero = (0,) * 16

    def check(reached: tuple[int, ...], ended: Ended) -> dict:
        reached = reached + (0,) * (16 - len(reached))
        view = ClientView(1, 1, ended, tokens_open=(0, 0), tokens_close=(40, 40), past_first_open=(0, 0),
                          past_first_close=(27, 27), positions_open=(zero, zero), positions_close=(reached, reached))
        return add_checks(dict(block), view)["checks"]["acceptance"]

    a = check((8, 7, 6, 6), one)
    assert a["verdict"] == "equal", a
    assert a["per_position"] == {"verdict": "equal", "client": [8, 7, 6, 6], "server": [9, 8, 7, 7],
                                 "client_range": [[8, 9], [7, 8], [6, 7], [6, 7]]}, a
    # the same total (27) spread otherwise: position 1 two short of the counter, no cut explains it
    b = check((7, 8, 6, 6), one)
    assert b["per_position"]["verdict"] == "differ" and b["verdict"] == "differ", b
    assert check((8, 7, 6, 6), Ended())["per_position"]["verdict"] == "differ"  # nothing ended: nothing cut


# --- the reset --------------------------------------------------------------------------------------

def test_sglang_flush_waits_out_a_busy_answer(served) -> None:
    served.post_status["/flush_cache"] = 400
    t0 = time.perf_counter()
    rec = reset_cache(served.url, "sglang", wait_s=0.6)
    assert not rec["ok"] and "HTTP 400" in rec["error"] and time.perf_counter() - t0 >= 0.5
    assert len(served.posts) >= 2  # tried again while it was busy
    served.post_status["/flush_cache"] = 200
    rec = reset_cache(served.url, "sglang")
    assert rec == {"engine": "sglang", "how": "POST /flush_cache", "ok": True, "ms": rec["ms"]}


def test_vllm_dev_route_missing_is_named(served) -> None:
    served.post_status["/reset_prefix_cache"] = 404
    rec = reset_cache(served.url, "vllm")
    assert not rec["ok"] and "VLLM_SERVER_DEV_MODE=1" in rec["error"]


def test_llamacpp_erases_each_slot_and_names_the_flag_it_needs(served) -> None:
    served.routes["/slots"] = (200, '[{"id": 0}, {"id": 1}, {"id": 2}]')
    rec = reset_cache(served.url, "llama.cpp")
    assert rec["ok"] and rec["slots"] == 3
    assert served.posts == ["/slots/0?action=erase", "/slots/1?action=erase", "/slots/2?action=erase"]
    served.posts.clear()
    served.post_status["/slots/0"] = 501
    rec = reset_cache(served.url, "llama.cpp")
    assert not rec["ok"] and "--slot-save-path" in rec["error"] and served.posts == ["/slots/0?action=erase"]
    served.routes["/slots"] = (501, "{}")
    assert "--no-slots" in reset_cache(served.url, "llama.cpp")["error"]


def test_an_unknown_engine_or_nothing_listening_is_an_error_line() -> None:
    assert "does not know" in reset_cache("http://127.0.0.1:9", "unknown")["error"]
    rec = reset_cache("http://127.0.0.1:9", "sglang")
    assert not rec["ok"] and "ConnectionRefusedError" in rec["error"] and "\n" not in rec["error"]


def test_a_stop_while_the_opening_page_is_still_coming_starts_no_sampler(served) -> None:
    import threading

    served.body, served.delay_s = PAGE % (1, 0, 5), 0.3
    w = ServerWatch(served.url, interval_s=0.05)
    t = threading.Thread(target=w.open)
    t.start()
    time.sleep(0.1)
    w.stop_sampling()  # the stage ended (cut) before its window closed
    t.join()
    served.delay_s = 0.0
    time.sleep(0.3)
    assert served.gets == 1 and w._thread is None


def test_requests_that_ended_while_a_slow_scrape_was_in_flight_are_a_range_not_a_disagreement() -> None:
    # H200, llama.cpp at C=256: the closing scrape took 300 ms; by the midpoints the client had 4962 of the
    # server's 5148 tokens (-3.6 %); the requests that ended while it was in flight make up the difference
    mid, narrow, wide = Ended(), Ended(), Ended()
    for e in (mid, narrow, wide):
        e.add(4962, None, 100, 120)
    narrow.output_tokens -= 40
    wide.add(200, None, 5, 6)
    view = ClientView(256, 1, mid, ended_narrow=narrow, ended_wide=wide)
    c = add_checks(_llama_block(5148, 40, 123, 103, (256, 256)), view)["checks"]
    assert c["tokens"]["verdict"] == "agree" and c["tokens"]["client_range"] == [4922, 5162]
    assert "-3.61 %" in c["tokens"]["why"]
    assert c["acceptance"]["verdict"] == "equal"
    # beyond what any scrape instant allows, it still disagrees
    c = add_checks(_llama_block(5400, 40, 123, 103, (256, 256)), ClientView(256, 1, mid, ended_narrow=narrow,
                                                                         ended_wide=wide))["checks"]
    assert c["tokens"]["verdict"] == "disagree"
