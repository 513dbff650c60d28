"""A minimal closed-loop driver for checking the simulator itself (tests, bench, calibration).

Not loadgen's measuring client: it only counts tokens and wall time, the way the
calibration table was measured (total output tokens / wall time of C users each
sending the next request as soon as the previous one ends).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import orjson

_TOPICS = (
    "a refrigerator keeps food cold", "plants turn sunlight into food", "the moon changes shape",
    "airplanes stay in the air", "bread rises in the oven", "people learn a second language",
    "bees make honey", "the tides work", "a bicycle stays upright", "rain clouds form",
    "my cat sleeps so much", "coffee keeps people awake", "the internet sends messages",
    "volcanoes erupt", "leaves change colour in autumn", "a compass finds north",
)  # fmt: skip
_OPENERS = (
    "Hi there! Could you explain to me how {t}? I would like a short and friendly answer, please.",
    "Hello, I was wondering how {t}. Can you tell me a little about it in plain and simple words?",
    "Can you help me understand how {t}? My friend asked me about it today and I did not know what to say.",
    "Good morning! I am curious how {t}. What would you say to someone who is completely new to it?",
)  # fmt: skip


def conversational_prompts(n: int, seed: int = 0) -> list[str]:
    """About 30-token chat questions (the traffic the pcie profile was calibrated with)."""
    rng = random.Random(seed)
    return [rng.choice(_OPENERS).format(t=rng.choice(_TOPICS)) for _ in range(n)]


@dataclass
class LoopResult:
    concurrency: int
    requests: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    chunks: int = 0
    ttft_s: list[float] = field(default_factory=list)

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, requests strictly one at a time.

    Hand-rolled because a self-check client must cost far less than the server it
    measures: at a high time-scale aiohttp's ~1 ms per request is most of a step.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.body = bytearray()
        self.chunks = 0
        self.first_ns = 0
        self.done: asyncio.Future | None = None
        self._head = True
        self._length = -1
        self._chunked = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection lost"))

    def send(self, raw: bytes) -> asyncio.Future:
        self.done = asyncio.get_running_loop().create_future()
        self.body.clear()
        self.chunks = 0
        self.first_ns = 0
        self._head = True
        self.transport.write(raw)
        return self.done

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if self._head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            del buf[: end + 4]
            self._head = False
            self._chunked = b"transfer-encoding: chunked" in head
            self._length = -1
            if not self._chunked:
                i = head.find(b"content-length:")
                self._length = int(head[i + 15 : head.index(b"\r\n", i) if b"\r\n" in head[i:] else None]) if i >= 0 else 0
        if not self._chunked:
            if len(buf) >= self._length:
                self.body += buf[: self._length]
                del buf[: self._length]
                self.chunks += 1
                self.first_ns = self.first_ns or time.perf_counter_ns()
                self.done.set_result(None)
            return
        while True:
            nl = buf.find(b"\r\n")
            if nl < 0:
                return
            size = int(buf[:nl], 16)
            if size == 0:
                if len(buf) < nl + 4:
                    return
                del buf[: nl + 4]
                self.done.set_result(None)
                return
            if len(buf) < nl + 2 + size + 2:
                return
            self.body += buf[nl + 2 : nl + 2 + size]
            del buf[: nl + 2 + size + 2]
            self.chunks += 1
            self.first_ns = self.first_ns or time.perf_counter_ns()


def _post(host: str, path: str, body: dict) -> bytes:
    payload = orjson.dumps(body)
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def _tokens_of(body: bytes, stream: bool, route: str) -> int:
    if not stream:
        d = orjson.loads(body)
        return d["meta_info"]["completion_tokens"] if route == "/generate" else d["usage"]["completion_tokens"]
    events = body.split(b"\n\n")
    for ev in reversed(events):
        if ev.startswith(b"data: {"):
            d = orjson.loads(ev[6:])
            if route == "/generate":
                return d["meta_info"]["completion_tokens"]
            if d.get("usage"):
                return d["usage"]["completion_tokens"]
    return 0


async def closed_loop(
    url: str,
    concurrency: int,
    per_user: int,
    *,
    max_tokens: int = 200,
    stream: bool = False,
    route: str = "/generate",
    seed: int = 0,
    duration_s: float | None = None,
) -> LoopResult:
    """``concurrency`` users each send ``per_user`` requests back to back on their own warm
    keep-alive connection; all start together. Streams are read whole, events counted.
    With ``duration_s``, users keep going until then (prompts are reused) and only requests
    finished by the deadline count; wall time is the duration."""
    host, _, port = url.removeprefix("http://").partition(":")
    prompts = conversational_prompts(concurrency * per_user, seed)
    res = LoopResult(concurrency)
    loop = asyncio.get_running_loop()
    conns = []
    for _ in range(concurrency):  # open and warm the pool before the clock starts
        _, proto = await loop.create_connection(_Conn, host, int(port))
        conns.append(proto)

    def body_for(prompt: str) -> dict:
        if route == "/generate":
            return {"text": prompt, "stream": stream,
                    "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}}  # fmt: skip
        return {"model": "default", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "stream": stream,
                "stream_options": {"include_usage": True}}  # fmt: skip

    deadline = None

    async def user(i: int) -> None:
        conn = conns[i]
        k = 0
        while (k < per_user) if deadline is None else True:
            raw = _post(host, route, body_for(prompts[i * per_user + k % per_user]))
            k += 1
            t0 = time.perf_counter_ns()
            await conn.send(raw)
            if deadline is not None and time.perf_counter() > deadline:
                return
            res.ttft_s.append((conn.first_ns - t0) / 1e9)
            res.chunks += conn.chunks
            res.output_tokens += _tokens_of(bytes(conn.body), stream, route)
            res.requests += 1

    t0 = time.perf_counter()
    if duration_s is not None:
        deadline = t0 + duration_s
    try:
        await asyncio.gather(*(user(i) for i in range(concurrency)))
        res.wall_s = time.perf_counter() - t0 if deadline is None else duration_s
    finally:
        for c in conns:
            c.transport.close()
    return res
