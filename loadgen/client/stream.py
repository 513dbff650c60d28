"""The streaming HTTP client: one aiohttp session, one record per request.

Timing (docs/metrics.md §How chunks are timed): a chunk is stamped with the time
its bytes were received from the socket, not the time our code got round to
parsing it. aiohttp's per-connection protocol object is swapped for a subclass
whose ``data_received`` reads the clock before aiohttp parses anything, so when
many streams receive in the same event-loop wake-up (a decode step of a batching
server), each is stamped on arrival instead of after the others' parsing.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from aiohttp.payload import BytesPayload
from aiohttp.streams import StreamReader

from loadgen.client.protocols import UNKNOWN, Protocol, StreamState
from loadgen.record import CANCELLED, RequestRecord
from loadgen.request import GenRequest
from loadgen.client.sse import SSEParser
from loadgen.client.tokencount import TokenCounter, reconcile

POSITIONS = 16
"""Draft positions the client counts apart (:meth:`StreamClient.positions_seen`): more than any
``num_speculative_tokens`` in use (EAGLE-3 drafts 3-8; vLLM's n-gram default 5)."""

_now = time.perf_counter_ns


class _StampingHandler(ResponseHandler):
    """aiohttp's response protocol, plus the receive time of every socket read."""

    def __init__(self, loop: asyncio.AbstractEventLoop, closes_after=None) -> None:
        super().__init__(loop)
        self.rx_marks: list[int] = []
        self._closes_after = closes_after
        """headers -> bool: the server will close this connection after this response (StreamClient)."""
        # On a loop that notes when each poll returned (loadgen.client.loops), that instant is the
        # stamp: every socket found readable by one poll gets the same one, whatever its
        # place in the burst. Elsewhere the clock is read here, before aiohttp parses.
        selector = getattr(loop, "_selector", None)
        self._clock = (lambda: selector.wake_ns) if hasattr(selector, "wake_ns") else _now

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        # Best of all, the kernel's receive time of the bytes (loadgen.client.loops' default loop).
        if getattr(transport, "_kernel_stamps", False):
            poll_clock = self._clock
            self._clock = lambda: transport.rx_ns or poll_clock()

    _head_body = None
    """The body of a response whose head the read being parsed completed (see :meth:`feed_data`)."""

    def data_received(self, data: bytes) -> None:
        if data:  # aiohttp calls it with b"" to resume its own parsing: no bytes arrived then
            self.rx_marks.append(self._clock())
        super().data_received(data)
        if self._head_body is not None:
            # the read that completed a response head keeps its stamp only if it brought body bytes too
            if not self._head_body.total_bytes:
                self.rx_marks.clear()
            self._head_body = None

    # aiohttp's defaults for the two flags below (set in its __init__ where its version has them)
    _reading_paused = False
    _buffer_paused = False

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp's body reader calls this after every read it hands out; unpaused, it only re-enters
        # data_received(b"") and asks the transport to resume what is not paused: about 6 % of the
        # client's CPU at 25 k one-token chunks/s (cProfile, H200 host). Paused, aiohttp's own runs.
        if self._reading_paused or self._buffer_paused:
            super().resume_reading(resume_parser)

    _read_deadline = 0.0
    _armed_for = 0.0

    def _reschedule_timeout(self) -> None:
        # aiohttp cancels its sock_read timer and starts a new one on every socket read (a heap push and
        # a cancelled handle each: 10 % of the client's CPU at 25 k chunks/s, cProfile on the H200 host).
        # Here a read only moves the deadline; the one timer, when it comes due, re-arms for the newest
        # deadline, so the timeout still fires read_s after the last read, as aiohttp's does.
        timeout = self._read_timeout
        if not timeout:
            self._drop_timeout()
            return
        self._read_deadline = self._loop.time() + timeout
        if self._read_timeout_handle is None:
            self._arm_read_timeout()

    def _arm_read_timeout(self) -> None:
        self._armed_for = self._read_deadline
        self._read_timeout_handle = self._loop.call_at(self._read_deadline, self._read_timeout_due)

    def _read_timeout_due(self) -> None:
        if self._read_deadline > self._armed_for:
            self._arm_read_timeout()
        else:
            self._read_timeout_handle = None
            self._on_read_timeout()

    def feed_data(self, data, size: int = 0) -> None:
        # aiohttp hands each parsed response head here, (message, payload), before anything can
        # release the connection: a short stream that arrived whole is at its end already and
        # goes back to the pool the moment the response object starts. Marked here, it is
        # closed instead.
        if isinstance(data, tuple) and data:
            # From this read on, reads are this response's: a list of its own, which its reader takes
            # (the previous response's reader, which may not have run yet, keeps and clears the old one).
            # The marks it starts with are not dropped when its reader starts late: each is a read of
            # this body. Dropping all but the newest there stamped a stream's first events with a later
            # read's instant whenever the reader started after them (a wave of 250 sends: TTFT +10 and
            # +20 ms, one and two chunk intervals, on 8 of 500 requests).
            self.rx_marks = self.rx_marks[-1:]
            self._head_body = data[1] if len(data) > 1 else None
            headers = getattr(data[0], "headers", None)
            if self._closes_after is not None and headers is not None and self._closes_after(headers):
                self.force_close()
        super().feed_data(data, size)


class _EventStreamBody(StreamReader):
    """aiohttp's body reader for an event stream, read only with ``readany``: no per-chunk bookkeeping.

    aiohttp notes every HTTP chunk's end (for ``readchunk``) and hands buffered chunks out one by one,
    each with its own size accounting and flow-control check: 14 % of the client's CPU at 25 k one-token
    chunks/s (one HTTP chunk an event; cProfile, H200 host). ``readany`` ignores chunk ends, so they are not noted;
    what is buffered goes out in one piece, accounted once. Swapped in by class (same slots) on a
    response's body when the installed aiohttp has the slots it uses (:data:`LEAN_BODY`).
    """

    __slots__ = ()

    def begin_http_chunk_receiving(self) -> None:
        pass

    def end_http_chunk_receiving(self) -> None:
        pass

    def _read_nowait(self, n: int) -> bytes:
        buffer = self._buffer
        if n != -1 or self._buffer_offset or not buffer:
            return super()._read_nowait(n)
        self._timer.assert_timeout()
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._size -= len(data)
        self._cursor += len(data)
        splits = self._http_chunk_splits  # chunk ends noted before the swap
        while splits and splits[0] < self._cursor:
            splits.popleft()
        if self._size < self._low_water and (splits is None or len(splits) < self._low_water_chunks):
            self._protocol.resume_reading()
        return data


LEAN_BODY = {"_buffer", "_buffer_offset", "_size", "_cursor", "_http_chunk_splits", "_low_water",
             "_low_water_chunks", "_protocol", "_timer"} <= set(StreamReader.__slots__)
"""Whether this aiohttp's StreamReader has what :class:`_EventStreamBody` uses (aiohttp 3.14 has)."""


class _StampedBody(BytesPayload):
    """A JSON body that notes when its last byte was handed to the socket.

    TTFT starts there: the time a request waits in our own loop before it is
    written (dozens of ms when 250 users start at once) is the client's, not the
    server's, and is reported separately as send lag.
    """

    sent_ns = 0

    def __init__(self, data: bytes) -> None:
        super().__init__(data, content_type="application/json")

    async def write_with_length(self, writer, content_length) -> None:
        await super().write_with_length(writer, content_length)
        self.sent_ns = _now()


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready to go: its id and its body's bytes, built before its send (:meth:`StreamClient.prepare`).

    An open loop prepares request i+1 while it waits for request i+1's planned instant, so building
    and serialising the body is not part of the hand-over when the instant comes.
    """

    req: GenRequest
    rid: str
    payload: bytes


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 10.0
    read_s: float = 120.0
    """Longest silence on an open stream (or before the headers) before it counts as stalled."""


class StreamClient:
    """Streams requests to one target over one pooled session."""

    def __init__(
        self,
        base_url: str,
        protocol: Protocol,
        *,
        target: str = "target",
        concurrency: int = 1,
        timeouts: Timeouts = Timeouts(),
        headers: dict | None = None,
        tokenizer: TokenCounter | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + protocol.path
        self.protocol = protocol
        self.target = target
        self.concurrency = concurrency
        self.timeouts = timeouts
        self.headers = dict(headers or {})
        self.tokenizer = tokenizer
        self.tokens_seen = 0
        """Tokens received so far (events of unknown count as one each), for progress display."""
        self.events_seen = 0
        """Events that carried tokens: ``tokens_seen - events_seen`` are the tokens past the first of each
        event, the accepted drafts on a stream that carries one step an event (vLLM's)."""
        self.event_sizes = [0] * (POSITIONS + 2)
        """Events of k tokens for k ≥ 2 at index k (the last index: that many or more), counted as they
        arrive: on a one-step-an-event stream, position p was accepted in each event of p + 2 tokens or more
        (:meth:`positions_seen`). Only events of several tokens pay for it."""
        self.inflight: dict[str, RequestRecord] = {}
        """rid → record of every request being streamed: a stage cut short folds their chunks so far."""
        self._session: aiohttp.ClientSession | None = None
        self.close_after_stream = False
        """Set once a server was seen to close connections after a stream (its headers, or a
        pooled connection found dead): from then on every finished stream's connection is
        closed here instead of pooled, so no request is first written to a dead socket."""
        self.stale_resends = 0
        """Requests sent again because a pooled connection turned out closed (also in each record's retries)."""

    async def __aenter__(self) -> "StreamClient":
        loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(
            # Below the 5 s idle keep-alive of uvicorn (SGLang, vLLM) and llama.cpp: a pooled
            # connection the server already closed would fail the next request's write.
            # An open loop without a cap (concurrency 0) has no limit: the pool would queue sends unseen.
            limit=self.concurrency + 8 if self.concurrency else 0, limit_per_host=0, keepalive_timeout=3.0, enable_cleanup_closed=True
        )
        # Private hook, checked by tests/test_client.py: the factory aiohttp uses for new connections.
        connector._factory = lambda: _StampingHandler(loop, self._closes_after)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, connect=None, sock_connect=self.timeouts.connect_s, sock_read=self.timeouts.read_s
            ),
            # Stamps must not include decompression; servers stream SSE uncompressed anyway.
            auto_decompress=False,
            read_bufsize=1 << 20,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _closes_after(self, headers) -> bool:
        """Whether to close (not pool) the connection of a response with these headers.

        Only streams: llama.cpp keeps connections after JSON answers (``warm``'s GETs). A server
        seen to close after a stream, by its headers (``Protocol.closes_after_stream``) or by a
        pooled connection found dead (``_send``), gets every later stream's connection closed
        here; the next request then pays a connect, which it paid after the failed send anyway.
        Measured on the CPU llama-server (60 requests a run, 3 runs): start to request written,
        p50, 0.77-0.82 -> 0.62-0.70 ms at C=1 and 0.72-1.02 -> 0.60-0.77 ms at C=4; TTFT, which
        starts when the request is written, within the server's run-to-run noise.
        """
        if "text/event-stream" not in headers.get("Content-Type", ""):
            return False
        if self.close_after_stream or self.protocol.closes_after_stream(headers):
            self.close_after_stream = True
            return True
        return False

    async def warm(self, n: int, path: str = "/v1/models") -> None:
        """Open up to ``n`` pooled connections before measuring (best effort)."""

        async def one() -> None:
            try:
                async with self._session.get(self.base_url + path) as resp:
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass

        await asyncio.gather(*(one() for _ in range(n)))

    def prepare(self, req: GenRequest, rid: str) -> Prepared:
        """The request's bytes as :meth:`stream` sends them, built now (ahead of its send)."""
        return Prepared(req, rid, orjson.dumps(self.protocol.build(req, rid)))

    async def stream(self, req: GenRequest | Prepared, rid: str = "", start_ns: int | None = None,
                     planned_ns: int = 0) -> RequestRecord:
        """Send one request and read its stream to the end; never raises for server faults.

        ``req`` is a request and its ``rid``, or a :class:`Prepared` one (its own rid; ``rid`` unused).
        ``start_ns`` lets the runner stamp the start itself, so its choice of
        window for the request and the record's TTFT use the same instant.
        """
        if not isinstance(req, Prepared):
            req = self.prepare(req, rid)
        req, rid, payload = req.req, req.rid, req.payload
        texts: list[str] | None = [] if self.tokenizer is not None else None
        rec = RequestRecord(target=self.target, workload=req.workload, rid=rid, start_ns=start_ns or _now(),
                            planned_ns=planned_ns, phase=req.phase, turn=req.turn)
        state = StreamState(chunks=rec.chunk_tokens, reply=[] if req.wants_reply else None)
        self.inflight[rid] = rec
        try:
            resp_cm, body = await self._send(payload, rec)
            async with resp_cm as resp:
                rec.sent_ns = body.sent_ns or rec.start_ns
                # the stamps of this body's reads so far (a response that arrived whole has none left)
                marks = resp.connection.protocol.rx_marks if resp.connection else []
                if resp.status != 200:
                    text = (await resp.content.read(2048)).decode("utf-8", "replace")
                    rec.fail(f"http_{resp.status}", _error_message(text) or resp.reason or "")
                    return rec
                ctype = resp.headers.get("Content-Type", "")
                if "text/event-stream" not in ctype:
                    text = (await resp.content.read(2048)).decode("utf-8", "replace")
                    rec.fail("not_sse", f"expected text/event-stream, got {ctype or 'no content type'}: {text[:200]}")
                    return rec
                if LEAN_BODY and type(resp.content) is StreamReader:
                    resp.content.__class__ = _EventStreamBody
                await self._read_stream(resp, rec, state, texts, marks)
        except asyncio.CancelledError:
            rec.fail(CANCELLED, "request cancelled by the runner")
            rec.end_ns = _now()
            raise
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            rec.fail("timeout", f"no data for {self.timeouts.read_s:g} s (read timeout)")
        except aiohttp.ClientConnectorError as exc:
            rec.fail("connect", f"cannot connect to {self.url}: {exc.os_error or exc}")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
            rec.fail("disconnected", f"server closed the stream: {exc}")
        except aiohttp.ClientError as exc:
            rec.fail("http_error", f"{type(exc).__name__}: {exc}")
        except orjson.JSONDecodeError as exc:
            rec.fail("bad_event", f"event is not JSON: {exc}")
        except OSError as exc:
            rec.fail("os_error", str(exc))
        except Exception as exc:  # noqa: BLE001 - e.g. an event whose shape an adapter cannot read
            # A failure no class above names is still a counted failure with its first message, never a
            # traceback that ends the user and loses the request (the stage would go on one user short).
            rec.fail("unknown", f"{type(exc).__name__}: {exc}")
        finally:
            self.inflight.pop(rid, None)
            if not rec.end_ns:
                rec.end_ns = _now()
        self._finish(rec, state, texts)
        return rec

    async def _send(self, payload: bytes, rec: RequestRecord):
        """POST, sending again if a pooled connection turns out closed before any response.

        Servers close keep-alive connections on their own schedule; a request sent
        on such a socket fails before the server answered anything, so it is sent
        again. Only a failure on a fresh connection counts; retries are counted in
        the stage results. A server that closes after every stream (llama.cpp,
        recognised by ``Protocol.closes_after_stream``) never gets here: its
        connections are closed when their stream ends. Any other server that is
        found to have closed a pooled connection costs one retry, and from then on
        this client closes connections after each stream too.
        """
        # Each failed attempt discards one dead pooled connection; when several streams end in one
        # decode step the server closes several at once, so allow one attempt per pooled connection.
        attempts = 1 + min(self.concurrency, 16)
        for attempt in range(1, attempts + 1):
            body = _StampedBody(payload)
            try:
                resp = await self._session.post(self.url, data=body, headers=self.headers)
                return resp, body
            except aiohttp.ClientConnectorError:
                raise  # nothing listens: not a stale connection
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                if attempt == attempts:
                    raise
                rec.retries += 1
                self.stale_resends += 1
                self.close_after_stream = True

    def positions_seen(self) -> tuple[int, ...]:
        """Per draft position p (0 to POSITIONS - 1), the events so far of p + 2 tokens or more: on a stream of
        one engine step an event, the drafts accepted at that position (vLLM's per-position counter)."""
        out, run = [], 0
        for k in range(len(self.event_sizes) - 1, 1, -1):
            run += self.event_sizes[k]
            out.append(run)
        return tuple(reversed(out))

    async def _read_stream(self, resp, rec, state, texts, marks) -> None:
        parser = SSEParser()
        feed = parser.feed_data
        on_event = self.protocol.on_event
        chunk_ns_append = rec.chunk_ns.append
        chunk_tokens = rec.chunk_tokens
        chunk_tokens_append = chunk_tokens.append
        events = len(chunk_tokens)
        sizes, top = self.event_sizes, POSITIONS + 1
        readany = resp.content.readany
        while data := await readany():
            if marks:
                stamp = marks[0]
                if len(marks) > 1:
                    rec.coalesced_reads += 1
                marks.clear()
            else:
                stamp = _now()
            seen = 0
            try:
                for event in feed(data):
                    n = on_event(state, event, texts)
                    if n > 0:
                        chunk_ns_append(stamp)
                        chunk_tokens_append(n)
                        seen += n
                        if n > 1:
                            sizes[n if n < top else top] += 1
                    elif n:
                        chunk_ns_append(stamp)
                        chunk_tokens_append(UNKNOWN)
                        # an event whose count comes only with the final usage (llama.cpp: one token an
                        # event) counts as one here: the progress line showed 0 tok/s on a 500 tok/s server
                        seen += 1
            finally:
                # once per read, not per event: nothing reads them between two events of one read
                self.tokens_seen += seen
                self.events_seen += len(chunk_tokens) - events
                events = len(chunk_tokens)
        rec.end_ns = _now()
        for ev in parser.close():
            n = on_event(state, ev.data, texts)
            if n:
                rec.chunk_ns.append(rec.end_ns)
                rec.chunk_tokens.append(n if n > 0 else UNKNOWN)
        if not state.done and state.finish_reason is None and state.error_class is None:
            state.fail("truncated", "stream ended without a finish reason or [DONE]")

    def _finish(self, rec: RequestRecord, state: StreamState, texts: list[str] | None) -> None:
        if state.error_class is not None:
            rec.fail(state.error_class, state.error_message or "")
        rec.prompt_tokens = state.prompt_tokens
        final = state.final_completion_tokens
        if final is None and state.completion_tokens and state.extra.get("continuous", True):
            final = state.completion_tokens
        rec.output_tokens = final
        rec.finish_reason = state.finish_reason
        rec.server_id = state.server_id
        rec.verify_ct = state.verify_ct
        rec.accept_length = state.accept_length
        rec.accepted_drafts = state.accepted_drafts
        rec.proposed_drafts = state.proposed_drafts
        if rec.accept_length is None and state.verify_ct and final:
            rec.accept_length = final / state.verify_ct
        rec.server_reasoning_tokens = state.server_reasoning_tokens
        rec.cached_tokens = state.cached_tokens
        if state.reply is not None:
            rec.reply = self.protocol.reply_text(state.reply)
        if state.switches:
            rec.reasoning_spans = state.reasoning_spans(len(rec.chunk_tokens))
        reconcile(rec, final, texts or [], self.tokenizer)
        if rec.reasoning_spans:
            tokens = rec.chunk_tokens
            rec.reasoning_tokens = sum(sum(tokens[lo:hi]) for lo, hi in rec.reasoning_spans)
        if rec.output_tokens is None and rec.chunk_tokens:
            rec.output_tokens = sum(rec.chunk_tokens)


def _error_message(body: str) -> str:
    """The message of an error body, whatever its shape (flat, nested, plain text)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.strip().splitlines()[0][:300] if body.strip() else ""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        if "message" in obj:
            return str(obj["message"])[:300]
        return str(err)[:300]
    return str(obj)[:300]
