"""Every way a server can fail is a counted failure with its class and message, never a crash."""

import asyncio
import itertools
import socket

import pytest
from aiohttp import web

from loadgen.client.stream import StreamClient, Timeouts
from loadgen.client.protocols import get_protocol
from loadgen.request import GenRequest
from loadgen.run.spec import RunOptions, StageSpec
from loadgen.run.stage import run_stage
from loadgen.client.target import Target

REQ = GenRequest(workload="w", prompt="hi", max_tokens=4)
EV = b'data: {"text":"a","meta_info":{"id":"x","completion_tokens":1,"finish_reason":null}}\n\n'


async def sse(request, body_parts, delay=0.0):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in body_parts:
        await resp.write(part)
        await asyncio.sleep(delay)
    return resp


def make_app():
    app = web.Application()

    async def ok(request):
        return await sse(request, [EV, b'data: {"text":"ab","meta_info":{"id":"x","completion_tokens":2,'
                                       b'"finish_reason":{"type":"length","length":2}}}\n\n', b"data: [DONE]\n\n"])

    async def http_400(request):
        return web.json_response({"object": "error", "message": "max_tokens must be positive", "code": 400}, status=400)

    async def not_sse(request):
        return web.Response(text="<html>hello</html>", content_type="text/html")

    async def error_event(request):
        return await sse(request, [EV, b'data: {"error": {"message": "out of memory", "code": 500}}\n\n',
                                   b"data: [DONE]\n\n"])

    async def stall(request):
        return await sse(request, [EV], delay=5.0)

    async def dies(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(EV)
        request.transport.close()
        return resp

    async def truncated(request):
        return await sse(request, [EV])

    async def garbage(request):
        return await sse(request, [b"data: {not json\n\n"])

    async def odd_shape(request):  # an event the adapter cannot read: a count that is not a number
        return await sse(request, [EV, b'data: {"text":"ab","meta_info":{"id":"x","completion_tokens":"two"}}\n\n'])

    for path, h in [("/odd", odd_shape), ("/ok", ok), ("/http400", http_400), ("/notsse", not_sse), ("/errev", error_event),
                    ("/stall", stall), ("/dies", dies), ("/trunc", truncated), ("/garbage", garbage)]:
        app.router.add_post(path + "/generate", h)
    return app


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server_url():
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(make_app())
    loop.run_until_complete(runner.setup())
    port = free_port()
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    yield loop, f"http://127.0.0.1:{port}"
    loop.run_until_complete(runner.cleanup())
    loop.close()


@pytest.mark.parametrize("route,cls,words", [
    ("/ok", None, ""),
    ("/http400", "http_400", "max_tokens must be positive"),
    ("/notsse", "not_sse", "text/html"),
    ("/errev", "server_error", "out of memory"),
    ("/stall", "timeout", "read timeout"),
    ("/dies", "disconnected", ""),
    ("/trunc", "truncated", "without a finish"),
    ("/garbage", "bad_event", "not JSON"),
    ("/odd", "unknown", "ValueError: invalid literal for int()"),
])
def test_each_failure_is_classified(server_url, route, cls, words):
    loop, url = server_url

    async def go():
        async with StreamClient(url + route, get_protocol("sglang"), timeouts=Timeouts(read_s=0.5)) as c:
            return await c.stream(REQ, "r1")

    rec = loop.run_until_complete(go())
    assert rec.error_class == cls, (rec.error_class, rec.error_message)
    if cls:
        assert words in (rec.error_message or "")
    else:
        assert rec.output_tokens == 2 and list(rec.chunk_tokens) == [1, 1]


def test_unreachable_url_is_a_failure_and_the_stage_goes_on():
    port = free_port()  # nothing listens there
    spec = StageSpec(concurrency=2, duration_s=0.5, warmup_s=0.0)
    src = lambda seed: itertools.repeat(REQ)  # noqa: E731
    loop = asyncio.new_event_loop()
    try:
        res = loop.run_until_complete(run_stage(Target("t", f"http://127.0.0.1:{port}"), spec, src, RunOptions()))
    finally:
        loop.close()
    d = res.to_dict()
    assert d["requests"]["failed"] > 0 and d["requests"]["completed"] == 0
    assert "connect" in d["requests"]["failures"]
    assert str(port) in d["requests"]["failures"]["connect"]["first_message"]
