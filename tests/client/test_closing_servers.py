"""The client against servers that close the connection after every stream without saying so.

A real loopback server written on raw asyncio sockets (aiohttp's own server always keeps or
announces): it answers ``Keep-Alive: timeout=5, max=100`` and no ``Connection: close``, streams
a small completion, and then either closes the socket (as llama.cpp's llama-server does after
every streamed response) or keeps it. Before the fix every request after the first was written
to the dead pooled socket first and counted as a retry (9 of 10 here; tests/e2e shows the same
on the real llama-server).
"""

from __future__ import annotations

import asyncio

import pytest

from loadgen.client.stream import StreamClient
from loadgen.client.protocols import get_protocol
from loadgen.request import GenRequest

EVENTS = [
    b'{"choices":[{"text":"a","index":0,"finish_reason":null}]}',
    b'{"choices":[{"text":"b","index":0,"finish_reason":null}]}',
    b'{"choices":[{"text":"","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":2,"prompt_tokens":3}}',
    b"[DONE]",
]


class RawServer:
    def __init__(self, *, close_after_stream: bool, server_header: str | None) -> None:
        self.close_after_stream = close_after_stream
        self.server_header = server_header
        self.connections = 0
        self.requests = 0
        self.port = 0
        self._server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> "RawServer":
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests += 1
                hdr = b"HTTP/1.1 200 OK\r\n"
                if self.server_header:
                    hdr += b"Server: " + self.server_header.encode() + b"\r\n"
                hdr += (b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                        b"Keep-Alive: timeout=5, max=100\r\n\r\n")
                writer.write(hdr)
                for ev in EVENTS:
                    data = b"data: " + ev + b"\n\n"
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                if self.close_after_stream:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _run(srv: RawServer, n: int, concurrency: int = 1):
    recs = []
    async with StreamClient(f"http://127.0.0.1:{srv.port}", get_protocol("completions", "m"),
                            concurrency=concurrency) as client:
        queue = list(range(n))

        async def user() -> None:
            while queue:
                i = queue.pop()
                recs.append(await client.stream(GenRequest(workload="w", max_tokens=2, prompt=f"p{i}"), f"r{i}"))

        await asyncio.gather(*(user() for _ in range(concurrency)))
        return recs, client


@pytest.mark.parametrize("concurrency", [1, 4])
def test_llama_cpp_closing_after_each_stream_costs_no_failed_send(concurrency: int) -> None:
    async def go():
        async with RawServer(close_after_stream=True, server_header="llama.cpp") as srv:
            recs, client = await _run(srv, 24, concurrency)
            return recs, client, srv

    recs, client, srv = asyncio.run(go())
    assert all(r.ok for r in recs), [(r.error_class, r.error_message) for r in recs if not r.ok]
    assert [r.output_tokens for r in recs] == [2] * 24
    assert sum(r.retries for r in recs) == 0 and client.stale_resends == 0
    # every request reached the server exactly once, each on a connection of its own
    assert srv.requests == 24 and srv.connections == 24


def test_another_server_that_closes_costs_one_retry_then_none() -> None:
    async def go():
        async with RawServer(close_after_stream=True, server_header="other/1.0") as srv:
            recs, client = await _run(srv, 12)
            return recs, client, srv

    recs, client, srv = asyncio.run(go())
    assert all(r.ok for r in recs)
    # The first request after the first stream finds its pooled connection dead (a real resend,
    # counted); from then on the client closes connections after each stream.
    assert sum(r.retries for r in recs) == 1 == client.stale_resends
    assert client.close_after_stream
    assert srv.requests == 12


def test_a_server_that_keeps_the_connection_gets_it_reused() -> None:
    async def go():
        async with RawServer(close_after_stream=False, server_header="uvicorn") as srv:
            recs, client = await _run(srv, 12)
            return recs, client, srv

    recs, client, srv = asyncio.run(go())
    assert all(r.ok for r in recs) and sum(r.retries for r in recs) == 0
    assert not client.close_after_stream
    assert srv.connections == 1 and srv.requests == 12
