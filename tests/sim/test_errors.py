"""SGLang's error behaviour (protocol doc §4): shapes, statuses, queue limits, aborts, disconnects."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from loadgen.sim.process import SimProcess
from tests.sim.helpers import call, get, request

LONG = {"max_new_tokens": 3000, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def small_sim(live):
    args = ["--context-length", "4096", "--max-running-requests", "2", "--max-queued-requests", "1"]
    with SimProcess(mode="baseline", time_scale=20, extra_args=args) as sim:
        yield sim


def _flat(r, code, type_):
    d = r.json()
    assert r.status == code
    assert set(d) == {"object", "message", "type", "param", "code"}, d
    assert d["object"] == "error" and d["type"] == type_ and d["code"] == code and d["param"] is None
    assert isinstance(d["message"], str) and d["message"]


def test_malformed_and_wrong_types(baseline_sim):
    url = baseline_sim.url
    r = call(url, "/generate", raw=b"{not json")
    assert r.status == 400 and isinstance(r.json()["error"], str)
    r = call(url, "/generate", {"text": "hi", "sampling_params": {"temperature": "hot"}})
    assert r.status == 400 and r.json()["error"].startswith("invalid type: string \"hot\"")
    r = call(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4, "foo": 1}})
    assert r.status == 400 and r.json()["error"].startswith("unknown field `foo`")
    r = call(url, "/generate", {"sampling_params": {}})
    assert r.status == 400 and "Either text, input_ids" in r.json()["error"]["message"]
    r = call(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": -1}})
    assert r.status == 400 and "max_new_tokens" in r.json()["error"]["message"]
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    _flat(call(url, "/v1/chat/completions", raw=b"[1,"), 400, "Bad Request")
    _flat(call(url, "/v1/chat/completions", {**chat, "max_tokens": "ten"}), 400, "Bad Request")
    _flat(call(url, "/v1/chat/completions", {**chat, "max_tokens": 0}), 400, "Bad Request")
    _flat(call(url, "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": -3}), 400, "Bad Request")
    _flat(call(url, "/v1/completions", {"model": "m", "prompt": ""}), 400, "Bad Request")
    _flat(call(url, "/v1/chat/completions", {"model": "m", "messages": []}), 400, "Bad Request")
    r = call(url, "/v1/completions", raw=b'{"prompt":"hi"}', headers={"Content-Type": "text/plain"})
    _flat(r, 400, "Bad Request")
    # and the server keeps serving
    ok = call(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    assert ok.status == 200 and ok.json()["meta_info"]["completion_tokens"] == 3


def test_context_length(small_sim):
    url = small_sim.url
    big = "word " * 5000
    r = call(url, "/generate", {"text": big, "sampling_params": {"max_new_tokens": 4}})
    assert r.status == 400
    assert r.json() == {"error": {"message": "The input (5001 tokens) is longer than the model's context length (4096 tokens)."}}
    r = call(url, "/generate", {"text": big, "sampling_params": {"max_new_tokens": 4}, "stream": True})
    assert r.status == 200  # a streaming /generate failure is HTTP 200 plus an error event
    ev = r.events()
    assert ev[-1] == "[DONE]" and ev[0]["error"]["code"] == 400 and ev[0]["error"]["type"] == "invalid_request_error"
    assert ev[0]["error"]["retryable"] is False
    r = call(url, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000})
    _flat(r, 400, "BadRequestError")
    assert r.json()["message"].startswith("Requested token count exceeds the model's maximum context length of 4096 tokens.")


async def _occupy(url, session, rid):
    body = {"text": "hello there", "sampling_params": LONG, "stream": True, "rid": rid}
    resp = await session.post(url + "/generate", data=orjson.dumps(body))
    await resp.content.readuntil(b"\n\n")  # running: it has its first token
    return resp


def test_queue_full_and_header_timing_and_abort(small_sim):
    url = small_sim.url

    async def scenario():
        async with aiohttp.ClientSession() as s:
            a = await _occupy(url, s, "occupy-a")
            b = await _occupy(url, s, "occupy-b")
            # /generate sends headers at once even while queued (the loads below say it is still waiting) ...
            queued = await s.post(url + "/generate", data=orjson.dumps(
                {"text": "queued one", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}, "stream": True}))
            assert queued.status == 200
            loads = (await request(url, "/v1/loads", method="GET", session=s)).json()["loads"][0]
            assert loads["num_running_reqs"] == 2 and loads["num_waiting_reqs"] == 1
            # ... the queue (max 1) is full now: 503 in each route's own shape
            r = await request(url, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}}, session=s)
            _flat(r, 503, "503")
            assert r.json()["message"] == "The request queue is full."
            r = await request(url, "/generate", {"text": "x", "stream": True}, session=s)
            ev = r.events()
            assert r.status == 200 and ev[-1] == "[DONE]" and len(ev) == 2
            assert ev[0]["text"] == "" and ev[0]["output_ids"] == []
            assert ev[0]["meta_info"]["finish_reason"] == {"type": "abort", "message": "The request queue is full.",
                                                           "status_code": 503, "err_type": None}  # fmt: skip
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            _flat(await request(url, "/v1/chat/completions", chat, session=s), 503, "503")
            r = await request(url, "/v1/chat/completions", {**chat, "stream": True,
                              "stream_options": {"include_usage": True}}, session=s)  # fmt: skip
            ev = r.events()
            assert r.status == 200 and ev[0]["error"]["type"] == "SERVICE_UNAVAILABLE" and ev[0]["error"]["code"] == 503
            assert ev[1]["choices"] == [] and ev[1]["usage"]["completion_tokens"] == 0 and ev[2] == "[DONE]"
            # duplicate rid while in flight
            r = await request(url, "/v1/completions", {"model": "m", "prompt": "x", "rid": "occupy-a"}, session=s)
            _flat(r, 400, "BadRequestError")
            assert "Duplicate request ID" in r.json()["message"]
            # abort by prefix frees both slots; the aborted streams end with an abort finish
            assert (await request(url, "/abort_request", {"rid": "occupy-"}, session=s)).status == 200
            for resp in (a, b):
                tail = (await resp.read()).split(b"\n\n")
                last = orjson.loads(tail[-3][6:])
                assert last["meta_info"]["finish_reason"]["type"] == "abort"
                assert last["meta_info"]["finish_reason"]["message"] == "Aborted"
                assert tail[-2] == b"data: [DONE]"
            body = await queued.read()
            assert b'"finish_reason":{"type":"length"' in body
            truth = (await request(url, "/loadgen/truth?rid=occupy-a", method="GET", session=s)).json()
            assert truth[0]["finish_reason"] == "abort"

    asyncio.run(scenario())


def test_openai_headers_wait_for_first_token(small_sim):
    url = small_sim.url

    async def scenario():
        async with aiohttp.ClientSession() as s:
            a = await _occupy(url, s, "hold-a")
            b = await _occupy(url, s, "hold-b")
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
            task = asyncio.ensure_future(request(url, "/v1/chat/completions", chat, session=s))
            await asyncio.sleep(0.3)
            assert not task.done()
            t_abort = time.perf_counter()
            await request(url, "/abort_request", {"rid": "", "abort_all": True}, session=s)
            r = await task
            assert r.status == 200 and r.headers_at >= t_abort  # no headers while it waited in the queue
            assert r.events()[-1] == "[DONE]"
            for resp in (a, b):
                await resp.read()

    asyncio.run(scenario())


def test_client_disconnect_frees_slot(small_sim):
    url = small_sim.url

    async def scenario():
        async with aiohttp.ClientSession() as s:
            resp = await _occupy(url, s, "gone-1")
            resp.close()  # the client goes away mid-stream
        async with aiohttp.ClientSession() as s:
            for _ in range(100):  # SGLang aborts 2 s (here 0.1 s at time-scale 20) after the disconnect
                loads = (await request(url, "/v1/loads", method="GET", session=s)).json()["loads"][0]
                if loads["num_running_reqs"] == 0:
                    break
                await asyncio.sleep(0.05)
            assert loads["num_running_reqs"] == 0
            truth = (await request(url, "/loadgen/truth?rid=gone-1", method="GET", session=s)).json()
            assert truth[0]["finish_reason"] == "abort" and truth[0]["completion_tokens"] < 3000
            metrics = (await request(url, "/metrics", method="GET", session=s)).body.decode()
            assert "sglang:num_aborted_requests_total" in metrics

    asyncio.run(scenario())


def test_flush_cache_refused_while_busy(small_sim):
    url = small_sim.url

    async def scenario():
        async with aiohttp.ClientSession() as s:
            a = await _occupy(url, s, "busy-1")
            r = await request(url, "/flush_cache", session=s)
            assert r.status == 400 and r.body.startswith(b"Cache not flushed")
            await request(url, "/abort_request", {"rid": "busy-1"}, session=s)
            await a.read()

    asyncio.run(scenario())
    assert get(url, "/health").status == 200
