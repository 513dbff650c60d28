"""Small HTTP helpers for the simulator tests: real loopback sockets, nothing mocked."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
import orjson


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes
    headers_at: float = 0.0
    """perf_counter() when the status line and headers arrived."""
    chunk_times: list[float] = field(default_factory=list)

    def json(self):
        return orjson.loads(self.body)

    def events(self) -> list:
        """SSE payloads in order: parsed JSON, or the string '[DONE]'."""
        out = []
        for block in self.body.split(b"\n\n"):
            if not block:
                continue
            assert block.startswith(b"data: "), block
            data = block[6:]
            out.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
        return out


async def request(
    url: str,
    path: str,
    body: object = None,
    *,
    method: str = "POST",
    raw: bytes | None = None,
    headers: dict | None = None,
    session: aiohttp.ClientSession | None = None,
) -> Reply:
    own = session is None
    if own:
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
    try:
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        async with session.request(method, url + path, data=data, headers=hdrs) as resp:
            rep = Reply(resp.status, dict(resp.headers), b"", headers_at=time.perf_counter())
            chunks = []
            async for chunk in resp.content.iter_any():
                rep.chunk_times.append(time.perf_counter())
                chunks.append(chunk)
            rep.body = b"".join(chunks)
            return rep
    finally:
        if own:
            await session.close()


def call(url: str, path: str, body: object = None, **kw) -> Reply:
    return asyncio.run(request(url, path, body, **kw))


def get(url: str, path: str) -> Reply:
    return call(url, path, method="GET")
