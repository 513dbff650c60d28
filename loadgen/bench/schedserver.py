"""A minimal, fast SSE server with a known send schedule: the truth for client tests.

Raw asyncio (no framework) so one core can send far more chunks per second than
any Python client can read. It speaks just enough of SGLang's streaming
``/generate`` (cumulative ``meta_info.completion_tokens``) and of the OpenAI
chat stream (continuous usage) for loadgen's adapters, and records the
``perf_counter_ns()`` right after each write, served at ``GET /truth``.

Schedule: a request's first chunk (1 token) goes out ``ttft_ms`` after the
request is read, then a chunk every ``interval_ms`` carrying the next value of
the ``tokens`` pattern (e.g. 1,3,2) until ``max_new_tokens``. In ``lockstep``
mode every stream sends on one shared tick, as a batching server does; in
``staggered`` mode each stream has its own clock.

Run: ``python -m loadgen.bench.schedserver --port 0 [--mode lockstep] ...``;
the first stdout line is ``schedserver: listening on http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

import orjson

_now = time.perf_counter_ns


@dataclass
class Schedule:
    ttft_ms: float = 20.0
    interval_ms: float = 10.0
    tokens: tuple[int, ...] = (1,)
    mode: str = "staggered"


@dataclass
class _Stream:
    rid: str
    chat: bool
    remaining: int
    transport: asyncio.Transport
    received_ns: int
    sends: list = field(default_factory=list)
    produced: int = 0
    step: int = 0


class SchedServer:
    def __init__(self, schedule: Schedule) -> None:
        self.s = schedule
        self.truth: dict[str, dict] = {}
        self.active: list[_Stream] = []
        self._tick_task: asyncio.Task | None = None

    # --- emitting -------------------------------------------------------------------------
    def metrics_page(self) -> bytes:
        from loadgen.sim.prom import Metrics

        m = self.metrics = getattr(self, "metrics", None) or Metrics()
        m.generation_tokens[True] = sum(len(v["sends"]) for v in self.truth.values())
        return m.render(model="bench", sched={"num_running_reqs": len(self.truth)}, spec=None).encode()

    def _event(self, st: _Stream, n: int, final: bool) -> bytes:
        st.produced += n
        if st.chat:
            obj = {"id": st.rid, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"content": " tok" * n}, "finish_reason": None}],
                "usage": {"prompt_tokens": 5, "completion_tokens": st.produced, "total_tokens": 5 + st.produced}}
            body = b"data: " + orjson.dumps(obj) + b"\n\n"
            if final:
                fin = {"id": st.rid, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
                body += b"data: " + orjson.dumps(fin) + b"\n\ndata: [DONE]\n\n"
        else:
            meta = {"id": st.rid, "finish_reason": {"type": "length", "length": st.produced} if final else None,
                    "prompt_tokens": 5, "completion_tokens": st.produced}
            body = b"data: " + orjson.dumps({"text": " tok" * st.produced, "meta_info": meta}) + b"\n\n"
            if final:
                body += b"data: [DONE]\n\n"
        return b"%x\r\n%s\r\n" % (len(body), body)

    def _send(self, st: _Stream) -> bool:
        """Send the stream's next chunk; True when it is finished."""
        pattern = self.s.tokens
        n = 1 if st.step == 0 else pattern[(st.step - 1) % len(pattern)]
        n = min(n, st.remaining)
        st.remaining -= n
        st.step += 1
        final = st.remaining == 0
        data = self._event(st, n, final)
        if final:
            data += b"0\r\n\r\n"
        if not st.transport.is_closing():
            st.transport.write(data)
        st.sends.append((_now(), n))
        if final:
            self.truth[st.rid] = {"received_ns": st.received_ns, "sends": st.sends}
        return final

    async def _lockstep(self) -> None:
        step = int(self.s.interval_ms * 1e6)
        nxt = _now()
        while True:
            nxt += step
            await asyncio.sleep(max(0.0, (nxt - _now()) / 1e9))
            now = _now()
            keep = []
            for st in self.active:
                if st.step == 0 and now < st.received_ns + int(self.s.ttft_ms * 1e6):
                    keep.append(st)
                elif not self._send(st):
                    keep.append(st)
            self.active = keep

    def _staggered(self, st: _Stream) -> None:
        loop = asyncio.get_running_loop()
        start = st.received_ns / 1e9 - time.perf_counter() + loop.time()
        first = start + self.s.ttft_ms / 1000

        def fire(k: int) -> None:
            if not self._send(st):
                loop.call_at(first + k * self.s.interval_ms / 1000, fire, k + 1)

        loop.call_at(first, fire, 1)

    def start_stream(self, st: _Stream) -> None:
        if self.s.mode == "lockstep":
            self.active.append(st)
            if self._tick_task is None:
                self._tick_task = asyncio.get_running_loop().create_task(self._lockstep())
        else:
            self._staggered(st)


class _Conn(asyncio.Protocol):
    def __init__(self, server: SchedServer) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = _now()
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1")
            lines = head.split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v.strip())
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4: head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length:]
            self.handle(method, path, body, t)

    def _plain(self, status: str, body: bytes, ctype: str = "application/json") -> None:
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), ctype.encode(), len(body), body))

    def handle(self, method: str, path: str, body: bytes, t: int) -> None:
        if method == "GET":
            if path.startswith("/metrics"):
                # an SGLang-shaped page (the simulator's renderer), for `bench client --scrape-ab`:
                # what a scrape costs the client is the point, not the figures on it
                self._plain("200 OK", self.server.metrics_page(), "text/plain; version=0.0.4")
            elif path.startswith("/truth"):
                self._plain("200 OK", orjson.dumps(self.server.truth))
                if "clear=1" in path:
                    self.server.truth.clear()
            else:
                self._plain("200 OK", b'{"object":"list","data":[]}')
            return
        req = orjson.loads(body or b"{}")
        chat = path.startswith("/v1/")
        if chat:
            rid = req.get("rid") or f"r{t}"
            n = int(req.get("max_tokens") or 16)
        else:
            rid = req.get("rid") or f"r{t}"
            n = int((req.get("sampling_params") or {}).get("max_new_tokens") or 16)
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
        self.server.start_stream(_Stream(rid, chat, n, self.transport, t))


async def serve(host: str, port: int, schedule: Schedule) -> None:
    server = SchedServer(schedule)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: _Conn(server), host, port, backlog=1024)
    sock = srv.sockets[0].getsockname()
    print(f"schedserver: listening on http://{sock[0]}:{sock[1]}", flush=True)
    await srv.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="schedserver")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--tokens", default="1", help="tokens per chunk after the first, a repeating pattern: 1,3,2")
    p.add_argument("--mode", choices=("staggered", "lockstep"), default="staggered")
    a = p.parse_args(argv)
    sched = Schedule(a.ttft_ms, a.interval_ms, tuple(int(x) for x in a.tokens.split(",")), a.mode)
    try:
        import uvloop

        uvloop.run(serve(a.host, a.port, sched))
    except ImportError:
        asyncio.run(serve(a.host, a.port, sched))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
