"""loadgen.run.servermetrics against a real loopback HTTP server serving what real servers answered.

``servermetrics_data/llamacpp_spec_before.txt`` / ``_after.txt`` are two scrapes of the e2e suite's n-gram
llama-server (b1-0c1e570, N=6 M=16) taken around one streamed chat request, whose final
``usage`` and ``timings`` are ``servermetrics_data/llamacpp_spec_request.json``; ``llamacpp_base.txt`` is the
baseline server's answer. The e2e test (tests/e2e/test_servermetrics_llama.py) does the same
live.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from loadgen.run import servermetrics as sm

DATA = Path(__file__).parent / "servermetrics_data"
BEFORE = (DATA / "llamacpp_spec_before.txt").read_text()
AFTER = (DATA / "llamacpp_spec_after.txt").read_text()
BASE = (DATA / "llamacpp_base.txt").read_text()
REQUEST = json.loads((DATA / "llamacpp_spec_request.json").read_text())

# Shaped as vLLM v1 writes them (labels per model and engine, per-position counter); not a
# capture: no vLLM runs here. It checks label summing and the name map, nothing vLLM-specific.
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


class Served:
    """A loopback aiohttp server whose /metrics answer the test sets."""

    def __init__(self) -> None:
        self.status = 200
        self.body = ""
        self.content_type = "text/plain"
        self.delay_s = 0.0

    async def handler(self, request: web.Request) -> web.Response:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.Response(status=self.status, text=self.body, content_type=self.content_type)


async def _with_server(fn):
    served = Served()
    app = web.Application()
    app.router.add_get("/metrics", served.handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as s:
            return await fn(s, f"http://127.0.0.1:{port}", served)
    finally:
        await runner.cleanup()


def run(fn):
    return asyncio.run(_with_server(fn))


def test_llamacpp_window_matches_the_requests_own_timings() -> None:
    async def go(s, url, served):
        served.body = BEFORE
        a = await sm.scrape(s, url)
        served.body = AFTER
        b = await sm.scrape(s, url)
        return a, b

    a, b = run(go)
    assert a.ok and b.ok and a.engine == b.engine == "llama.cpp" and a.error == ""
    assert b.t_ns > a.t_ns and a.rtt_ns > 0
    w = sm.window_summary(a, b)
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


def test_llamacpp_baseline_has_counters_but_no_positions() -> None:
    snap = sm.parse(BASE, "u")
    w = sm.window_summary(snap, snap)
    assert w["available"] and w["output_tokens"] == 0 and w["drafts"] == 0
    assert w["accepted_per_position"] == [] and w["accept_rate"] is None and w["mean_draft_length"] is None


def test_vllm_shaped_labels_are_summed_and_positions_grouped() -> None:
    a = sm.parse(VLLM % (100, 50, 10, 30, 12, 6, 4, 2), "u", 0)
    b = sm.parse(VLLM % (160, 70, 20, 60, 30, 14, 10, 6), "u", 2_000_000_000)
    w = sm.window_summary(a, b)
    assert w["engine"] == "vllm" and w["counted_when"] == "step" and w["interval_s"] == 2.0
    assert w["output_tokens"] == 80 and w["drafts"] == 10 and w["draft_tokens"] == 30
    assert w["accepted_tokens"] == 18 and w["accepted_per_position"] == [8, 6, 4]
    assert w["mean_draft_length"] == 3.0 and w["mean_accept_length"] == 2.8
    assert w["busy_slot_steps"] is None  # llama.cpp's gauge only


@pytest.mark.parametrize("status, body, ctype, expect", [
    (404, "File Not Found", "text/plain", "HTTP 404"),
    (501, '{"error": "metrics disabled"}', "application/json", "HTTP 501"),
    (200, '{"not": "prometheus"}', "application/json", "Content-Type application/json"),
    (200, "<html><body>hello</body></html>", "text/html", "Content-Type text/html"),
    (200, "this is {not prometheus\n", "text/plain", "not Prometheus text"),
    (200, "", "text/plain", "no metrics"),
])
def test_a_server_without_metrics_gives_a_reason_not_an_exception(status, body, ctype, expect) -> None:
    async def go(s, url, served):
        served.status, served.body, served.content_type = status, body, ctype
        return await sm.scrape(s, url), url

    snap, url = run(go)
    assert not snap.ok and expect in snap.error and url + "/metrics" in snap.error
    assert "\n" not in snap.error
    w = sm.window_summary(snap, snap)
    assert w == {"available": False, "reason": snap.error, "url": url + "/metrics"}


def test_nothing_listening_and_timeouts_are_reasons() -> None:
    async def go(s, url, served):
        served.body, served.delay_s = AFTER, 1.0
        slow = await sm.scrape(s, url, timeout_s=0.1)
        dead = await sm.scrape(s, "http://127.0.0.1:9")  # discard port: nothing listens
        return slow, dead

    slow, dead = run(go)
    assert not slow.ok and "no answer in 0.1 s" in slow.error
    assert not dead.ok and "ClientConnectorError" in dead.error and "127.0.0.1:9/metrics" in dead.error


def test_missing_snapshot_restart_and_unknown_engine() -> None:
    a, b = sm.parse(BEFORE, "u"), sm.parse(AFTER, "u")
    assert sm.window_summary(None, b) == {"available": False, "reason": "not scraped at window open", "url": "u"}
    assert sm.window_summary(a, None)["reason"] == "not scraped at window close"
    back = sm.window_summary(b, a)  # counters went down: the server restarted in between
    assert not back["available"] and "backwards" in back["reason"]
    other = sm.parse("# TYPE foo_total counter\nfoo_total 3\n", "u")
    assert other.ok and other.engine == "unknown"
    assert not sm.window_summary(other, other)["available"]
    assert "engine changed" in sm.window_summary(a, sm.parse(VLLM % ((1,) * 8), "u"))["reason"]


def test_without_prometheus_client_the_figures_are_missing_not_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)  # import now raises ImportError
    snap = sm.parse(AFTER, "http://h:1/metrics")
    assert not snap.ok and "prometheus_client is not installed" in snap.error
    assert sm.window_summary(snap, snap)["available"] is False
