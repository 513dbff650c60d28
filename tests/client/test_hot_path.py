"""The cheaper per-chunk path gives what the plain one gave: the same events, bytes on the wire, records
and read timeout."""

import asyncio
import time

import orjson
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client.protocols import get_protocol
from loadgen.client.sse import SSEParser
from aiohttp.streams import StreamReader

from loadgen.client.stream import LEAN_BODY, Prepared, StreamClient, Timeouts, _EventStreamBody, _StampingHandler
from loadgen.client.loops import new_event_loop
from loadgen.request import GenRequest

# SGLang shapes (tests/client/test_sse.py): cumulative /generate, and chat with a named event and a comment
GENERATE = (
    b'data: {"text":" Paris","output_ids":[11],"meta_info":{"id":"a","finish_reason":null,"completion_tokens":1}}\n\n'
    + 'data: {"text":" Paris est \u00e9 \U0001f600","meta_info":{"id":"a","completion_tokens":6}}\n\n'.encode()
    + b"data: [DONE]\n\n"
)
CHAT = (
    b'data: {"id":"b","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}\n\n'
    b"event: sglext_ids\ndata: {\"ids\":[1,2]}\n\n"
    b": keep-alive comment\n\n"
    b"data:x\ndata: y\n\n"
    b"data: [DONE]\n\n"
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([GENERATE, CHAT, GENERATE.replace(b"\n", b"\r\n"), CHAT.replace(b"\n", b"\r"),
                        CHAT.replace(b"\n", b"\r\n")]),
       st.lists(st.integers(min_value=0, max_value=2000), max_size=40))
def test_feed_data_is_the_data_of_feeds_events_whatever_the_reads(stream, cuts):
    cuts = sorted({c % (len(stream) + 1) for c in cuts}) + [len(stream)]
    events, datas = SSEParser(), SSEParser()
    want, got, prev = [], [], 0
    for c in cuts:
        want += [e.data for e in events.feed(stream[prev:c])]
        got += datas.feed_data(stream[prev:c])
        prev = c
    assert got == want
    assert [e.data for e in datas.close()] == [e.data for e in events.close()]


EV = b'data: {"text":"a","meta_info":{"id":"x","completion_tokens":%d,"finish_reason":%s}}\n\n'


def _serve(loop, handler):
    app = web.Application()
    app.router.add_post("/generate", handler)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


def _stream_app(bodies: list, gap_s: float, stall_s: float = 0.0):
    async def handler(request):
        bodies.append(await request.read())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(1, 6):
            await resp.write(EV % (k, b'{"type":"length"}' if k == 5 and not stall_s else b"null"))
            await asyncio.sleep(gap_s)
        await asyncio.sleep(stall_s)
        return resp

    return handler


def test_a_prepared_request_puts_the_same_bytes_on_the_wire_and_gives_the_same_record():
    loop = new_event_loop()
    bodies: list[bytes] = []
    runner, url = _serve(loop, _stream_app(bodies, 0.0))
    req = GenRequest(workload="w", prompt="hello", max_tokens=5, seed=3, extra={"top_k": 4})

    async def go():
        async with StreamClient(url, get_protocol("sglang")) as c:
            plain = await c.stream(req, "r-1")
            ready = c.prepare(req, "r-1")
            assert isinstance(ready, Prepared) and ready.rid == "r-1" and ready.req is req
            prepared = await c.stream(ready)
            return plain, prepared

    try:
        plain, prepared = loop.run_until_complete(go())
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()
    assert bodies[0] == bodies[1] == prepared_payload(req, "r-1")
    assert orjson.loads(bodies[0])["rid"] == "r-1"
    for rec in (plain, prepared):
        assert rec.ok and rec.rid == "r-1" and rec.finish_reason == "length" and rec.output_tokens == 5
        assert list(rec.chunk_tokens) == [1, 1, 1, 1, 1] and len(rec.chunk_ns) == 5


def prepared_payload(req: GenRequest, rid: str) -> bytes:
    return orjson.dumps(get_protocol("sglang").build(req, rid))


def test_read_timeout_fires_read_s_after_the_last_read_not_the_first():
    """One timer per silence, re-armed for the newest read: reads 0.15 s apart for 0.75 s never time out
    at read_s 0.4; the silence after them does, about 0.4 s after the last read."""
    loop = new_event_loop()
    runner, url = _serve(loop, _stream_app([], 0.15, stall_s=3.0))

    async def go():
        async with StreamClient(url, get_protocol("sglang"), timeouts=Timeouts(read_s=0.4)) as c:
            t0 = time.perf_counter_ns()
            rec = await c.stream(GenRequest(workload="w", prompt="x", max_tokens=5), "r")
            return rec, t0

    try:
        rec, t0 = loop.run_until_complete(go())
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()
    assert rec.error_class == "timeout" and len(rec.chunk_ns) == 5
    silence = (rec.end_ns - rec.chunk_ns[-1]) / 1e9
    assert 0.39 <= silence < 0.4 + 0.25, silence


class _Transport:
    def __init__(self) -> None:
        self.resumed = 0

    def resume_reading(self) -> None:
        self.resumed += 1

    def pause_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name, default=None):
        return default


def test_resume_reading_is_aiohttps_own_when_paused_and_nothing_otherwise():
    loop = asyncio.new_event_loop()
    try:
        h = _StampingHandler(loop)
        h.transport = tr = _Transport()
        h.resume_reading()
        assert tr.resumed == 0
        h._reading_paused = True
        h.resume_reading()
        assert tr.resumed == 1 and not h._reading_paused
    finally:
        loop.close()


class _Protocol:
    def __init__(self) -> None:
        self.resumed = self.paused = 0

    def resume_reading(self, resume_parser: bool = True) -> None:
        self.resumed += 1

    def pause_reading(self) -> None:
        self.paused += 1


def _read_all(cls, feeds: list[list[bytes]], swap_after: int) -> tuple[list[bytes], int, int]:
    """Feed HTTP chunks read by read (swapping the class after ``swap_after`` reads) and readany each time."""
    loop = asyncio.new_event_loop()
    try:
        proto = _Protocol()
        body = StreamReader(proto, 64, loop=loop)
        out = []
        for i, chunks in enumerate(feeds):
            if i == swap_after:
                body.__class__ = cls
            for c in chunks:
                body.begin_http_chunk_receiving()
                body.feed_data(c)
                body.end_http_chunk_receiving()
            out.append(loop.run_until_complete(body.readany()))
        body.feed_eof()
        out.append(loop.run_until_complete(body.readany()))
        return out, body._size, body.total_bytes
    finally:
        loop.close()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=5), min_size=1, max_size=8),
       st.integers(min_value=0, max_value=8))
def test_the_lean_body_reader_hands_out_what_aiohttps_does(feeds, swap_after):
    assert LEAN_BODY, "this aiohttp lacks what the lean body reader uses: the client runs without it"
    want = _read_all(StreamReader, feeds, swap_after)
    got = _read_all(_EventStreamBody, feeds, swap_after)
    assert got == want


def test_a_reader_that_starts_after_the_first_events_stamps_the_first_with_its_own_read():
    """Events that arrive before the reader has taken its response (its task behind others: a wave of sends)
    are a coalesced read: stamped with the first one's instant, as any coalesced read is, not the newest's."""
    loop = new_event_loop()
    sent: list[int] = []

    async def handler(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k, fin, wait in ((1, b"null", 0.05), (2, b"null", 0.05), (3, b'{"type":"length"}', 0.15)):
            await asyncio.sleep(wait)  # the last after the reader has started: the stream is still open then
            await resp.write(EV % (k, fin))
            sent.append(time.perf_counter_ns())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    class LateReader(StreamClient):
        async def _send(self, payload, rec):
            got = await super()._send(payload, rec)
            await asyncio.sleep(0.15)  # the loop reads both events meanwhile; this task takes them after
            return got

    runner, url = _serve(loop, handler)

    async def go():
        async with LateReader(url, get_protocol("sglang")) as c:
            return await c.stream(GenRequest(workload="w", prompt="x", max_tokens=3), "r")

    try:
        rec = loop.run_until_complete(go())
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()
    assert rec.ok and list(rec.chunk_tokens) == [1, 1, 1]
    assert abs(rec.chunk_ns[0] - sent[0]) < 3_000_000, (rec.chunk_ns[0] - sent[0]) / 1e6
    assert rec.chunk_ns[1] == rec.chunk_ns[0] and rec.coalesced_reads == 1
    assert abs(rec.chunk_ns[2] - sent[2]) < 3_000_000, (rec.chunk_ns[2] - sent[2]) / 1e6


def test_positions_seen_counts_the_events_that_reached_each_draft_position():
    """Events of 1, 5, 3, 1 and 17 tokens (cumulative counts 1, 6, 9, 10, 27): position p was reached by the
    events of p + 2 tokens or more — 3, 3, 2, 2, then the 17-token one alone up to the last position counted
    (POSITIONS, a 17-token event reaching it) — and the tokens past each event's first are 22 (4 + 2 + 16)."""
    from loadgen.client.stream import POSITIONS

    loop = new_event_loop()

    async def handler(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for total in (1, 6, 9, 10, 27):
            await resp.write(EV % (total, b'{"type":"length"}' if total == 27 else b"null"))
            await asyncio.sleep(0.01)  # one read an event (several in one read count the same)
        return resp

    runner, url = _serve(loop, handler)

    async def go():
        async with StreamClient(url, get_protocol("sglang")) as c:
            assert c.positions_seen() == (0,) * POSITIONS
            rec = await c.stream(GenRequest(workload="w", prompt="p", max_tokens=27), "r-1")
            return rec, c.positions_seen(), c.tokens_seen - c.events_seen

    try:
        rec, reached, past_first = loop.run_until_complete(go())
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()
    assert list(rec.chunk_tokens) == [1, 5, 3, 1, 17]
    assert POSITIONS == 16 and reached == (3, 3, 2, 2) + (1,) * 12 and past_first == 22
