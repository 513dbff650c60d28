"""The simulated server's generation routes: SGLang's ``/generate`` and the OpenAI routes.

In: HTTP requests (validated by :mod:`loadgen.sim.validate`). Out: streamed or whole
responses in each route's wire shape (docs/simulator.md): /generate sends headers at once and
streams cumulative text (deltas with --incremental-streaming-output); the OpenAI routes hold
headers until the first token exists. Handlers only format and write; all timing comes from the
scheduler, and every write is stamped into the request's ground truth (``_stamp``).

A mixin of :class:`loadgen.sim.server.SimServer`, which owns the request life (``_start``,
``_stamp``, ``_meta``, ``_usage``, …) these handlers call.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from loadgen.sim.faults import EARLY as EARLY_FAULTS
from loadgen.sim.flight import Flight
from loadgen.sim.scheduler import now_ns
from loadgen.sim.textgen import OutputView
from loadgen.sim.validate import BadRequest, Job, SchemaError, parse_chat, parse_completions, parse_generate
from loadgen.sim.wire import DONE, SSE_HEADERS, json_response as _json, openai_error as _openai_error, sse as _sse


class GenerationRoutes:
    """``/generate``, ``/v1/completions`` and ``/v1/chat/completions``."""

    @staticmethod
    async def _body(request: web.Request) -> object:
        raw = await request.read()
        return orjson.loads(raw)

    # ---- /generate ---------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        received = now_ns()
        try:
            body = await self._body(request)
        except orjson.JSONDecodeError as exc:
            return _json({"error": f"Failed to parse the request body as JSON: {exc}"}, 400)
        stream = isinstance(body, dict) and body.get("stream") is True
        try:
            job = parse_generate(body)
            fault = self._draw_fault(job.stream)
            fl = None if fault in EARLY_FAULTS else self._start(job, received, fault=fault)
        except SchemaError as exc:
            return _json({"error": str(exc)}, 400)
        except ValueError as exc:
            if not stream:
                return _json({"error": {"message": str(exc)}}, 400)
            resp = web.StreamResponse(headers=SSE_HEADERS)
            await resp.prepare(request)
            err = {"error": {"message": str(exc), "type": "invalid_request_error", "code": 400, "retryable": False}}
            await resp.write(_sse(err) + DONE)
            return resp
        if fl is None:
            return await self._early_fault(request, job, received, fault)
        try:
            if job.stream:
                return await self._generate_stream(request, fl)
            await fl.req.wait_change(1 << 62)
            req = fl.req
            if req.abort_status is not None:
                return _openai_error(req.abort_message or "", str(req.abort_status), req.abort_status)
            if fl.fault and await self._before_headers(request, fl):
                return web.Response()  # the connection is reset: nothing of this reaches the client
            n = req.produced
            fl.out.advance(n)
            body = {"text": fl.out.text, "output_ids": fl.out.ids(0, n), "meta_info": self._meta(fl, n, True)}
            resp = _json(body)
            await resp.prepare(request)
            await resp.write_eof()
            self._stamp(fl, n)
            return resp
        finally:
            self._handler_done(fl)

    async def _generate_stream(self, request: web.Request, fl: Flight) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        if fl.fault:
            await self._before_headers(request, fl)
        await resp.prepare(request)  # headers at once, as SGLang's /generate does
        req, out = fl.req, fl.out
        incremental = self.cfg.incremental
        sent = 0
        while True:
            await req.wait_change(sent)
            n = req.produced
            if n == sent and not req.finished:
                continue
            if fl.fault and (sent or req.finished) and await self._midstream_fault(request, resp, fl):
                return resp
            if self.burst:
                # llama.cpp's shape: every token but the step's last its own event, written back to back
                # (no await between the writes while the socket takes them)
                for m in range(sent + 1, n):
                    delta = out.advance(m)
                    event = {"text": delta if incremental else out.text,
                             "output_ids": out.ids(sent if incremental else 0, m),
                             "meta_info": self._meta(fl, m, sent == 0, partial=True)}
                    await resp.write(_sse(event))
                    self._stamp(fl, m - sent)
                    sent = m
            delta = out.advance(n)
            if incremental:
                event = {"text": delta, "output_ids": out.ids(sent, n)}
            else:
                event = {"text": out.text, "output_ids": out.ids(0, n)}
            event["meta_info"] = self._meta(fl, n, sent == 0)
            await resp.write(_sse(event) + (DONE if req.finished else b""))
            self._stamp(fl, n - sent)
            sent = n
            if req.finished:
                return resp

    # ---- OpenAI routes -----------------------------------------------------------------

    async def _openai_job(self, request: web.Request, parse) -> Job | web.Response:
        ctype = request.headers.get("Content-Type", "")
        if not ctype.startswith("application/json"):
            return _openai_error("Unsupported Media Type: Only 'application/json' is allowed", "Bad Request", 400)
        try:
            body = await self._body(request)
        except orjson.JSONDecodeError as exc:
            return _openai_error(f"JSON decode error: {exc}", "Bad Request", 400)
        try:
            return parse(body)
        except BadRequest as exc:
            return _openai_error(str(exc), "Bad Request", 400)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, parse_completions, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, parse_chat, chat=True)

    async def _openai(self, request: web.Request, parse, chat: bool) -> web.StreamResponse:
        received = now_ns()
        job = await self._openai_job(request, parse)
        if isinstance(job, web.Response):
            return job
        fault = self._draw_fault(job.stream)
        if fault in EARLY_FAULTS:
            return await self._early_fault(request, job, received, fault)
        try:
            fl = self._start(job, received, fault=fault)
        except ValueError as exc:
            return _openai_error(str(exc), "BadRequestError", 400)
        try:
            if job.stream:
                return await self._openai_stream(request, fl, chat)
            await fl.req.wait_change(1 << 62)
            req = fl.req
            if req.abort_status is not None:
                return _openai_error(req.abort_message or "", str(req.abort_status), req.abort_status)
            if fl.fault and await self._before_headers(request, fl):
                return web.Response()  # the connection is reset: nothing of this reaches the client
            resp = _json(self._openai_full(fl, chat))
            await resp.prepare(request)
            await resp.write_eof()
            self._stamp(fl, req.produced)
            return resp
        finally:
            self._handler_done(fl)

    def _openai_finish(self, fl: Flight) -> tuple[str, int | str | None]:
        if fl.req.abort_message:
            return "abort", None
        return fl.finish.type, fl.finish.matched

    def _openai_full(self, fl: Flight, chat: bool) -> dict:
        req = fl.req
        thought = fl.out.advance(min(req.produced, self.cfg.reasoning_tokens)) if chat else ""
        fl.out.advance(req.produced)
        reason, matched = self._openai_finish(fl)
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": fl.out.text[len(thought):],
                            "reasoning_content": thought or None, "tool_calls": None},
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
            if fl.job.return_meta_info:
                choice["meta_info"] = self._meta(fl, req.produced, True)
            body = {
                "id": req.rid,
                "object": "chat.completion",
                "created": fl.created,
                "model": fl.job.model,
                "choices": [choice],
                "usage": self._usage(fl, req.produced, True, chat=True),
                "metadata": {"weight_version": "default"},
            }
        else:
            body = {
                "id": req.rid,
                "object": "text_completion",
                "created": fl.created,
                "model": fl.job.model,
                "choices": [
                    {"index": 0, "text": fl.out.text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
                ],
                "usage": self._usage(fl, req.produced, True),
            }
        if fl.job.spec_details:
            body["sglext"] = {"spec_tokens_details": self._spec_details(req)}
        return body

    async def _openai_stream(self, request: web.Request, fl: Flight, chat: bool) -> web.StreamResponse:
        req, out, job = fl.req, fl.out, fl.job
        await req.wait_change(0)  # headers wait for the first token, as SGLang's handlers do
        resp = web.StreamResponse(headers=SSE_HEADERS)
        if fl.fault:
            await self._before_headers(request, fl)
        await resp.prepare(request)
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = orjson.dumps({"id": req.rid, "object": obj, "created": fl.created, "model": job.model})[:-1]
        if req.abort_status is not None and req.produced == 0:
            err = {"error": {"object": "error", "message": req.abort_message, "type": "SERVICE_UNAVAILABLE",
                             "param": None, "code": req.abort_status}}  # fmt: skip
            tail = self._stream_tail(fl, head, chat, usage_only=True)
            await resp.write(_sse(err) + tail)
            return resp
        # Content events come from fixed byte templates: the hot path is one orjson call per event.
        if chat:
            text = ChatText(head, self.cfg.reasoning_tokens)
            post = b'},"logprobs":null,"finish_reason":null,"matched_stop":null}]'
            role = (
                b"data: " + head + b',"choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
            )
        else:
            text = PlainText(b"data: " + head + b',"choices":[{"index":0,"text":')
            post = b',"logprobs":null,"finish_reason":null,"matched_stop":null}]'
            role = b""
        usage_null = b"" if chat else b',"usage":null'
        sent = 0
        first = True
        while True:
            await req.wait_change(sent)
            n = req.produced
            if n == sent and not req.finished:
                continue
            if fl.fault and (sent or req.finished) and await self._midstream_fault(request, resp, fl):
                return resp
            if self.burst:
                # llama.cpp's shape: every token but the step's last its own event, written back to back
                for m in range(sent + 1, n):
                    mid = text.event(out, sent, m)
                    if not mid:
                        continue  # no text for it (a trimmed stop string): the next event carries it
                    usage = b',"usage":' + orjson.dumps(self._usage(fl, m, chat, chat)) if job.continuous_usage else usage_null
                    ev = mid + post + usage + b"}\n\n"
                    await resp.write(role + ev if first and chat else ev)
                    first = False
                    self._stamp(fl, m - sent, text)
                    sent = m
            mid = text.event(out, sent, n)
            parts: list[bytes] = []
            if first and chat:
                parts.append(role)
            first = False
            usage = (
                b',"usage":' + orjson.dumps(self._usage(fl, n, chat, chat)) if job.continuous_usage else usage_null
            )
            if not chat and req.finished:
                reason, matched = self._openai_finish(fl)
                fin = orjson.dumps({"finish_reason": reason, "matched_stop": matched})[1:-1]
                parts.append(mid + b',"logprobs":null,' + fin + b"}]" + usage + b"}\n\n")
            elif n > sent and mid:
                parts.append(mid + post + usage + b"}\n\n")
            if req.finished:
                parts.append(self._stream_tail(fl, head, chat, usage_only=False))
            await resp.write(b"".join(parts))
            self._stamp(fl, n - sent, text)
            sent = n
            if req.finished:
                return resp

    def _stream_tail(self, fl: Flight, head: bytes, chat: bool, usage_only: bool) -> bytes:
        """Chat's separate finish event, then sglext and usage events (choices []), then [DONE]."""
        req, job = fl.req, fl.job
        parts: list[bytes] = []
        if not usage_only:
            if chat:
                reason, matched = self._openai_finish(fl)
                fin = {"index": 0, "delta": {"reasoning_content": None}, "logprobs": None,
                       "finish_reason": reason, "matched_stop": matched}  # fmt: skip
                parts.append(b"data: " + head + b',"choices":' + orjson.dumps([fin]) + b"}\n\n")
            if job.spec_details:
                ext = {"sglext": {"spec_tokens_details": self._spec_details(req)}}
                parts.append(b"data: " + head + b',"choices":[],' + orjson.dumps(ext)[1:] + b"\n\n")
        if job.include_usage:
            usage = orjson.dumps({"choices": [], "usage": self._usage(fl, req.produced, chat, chat)})[1:]
            parts.append(b"data: " + head + b"," + usage + b"\n\n")
        parts.append(DONE)
        return b"".join(parts)


class PlainText:
    """A completions stream's events: the tokens' text, even when empty (the finish rides on the last)."""

    __slots__ = ("pre",)
    think = 0
    """Tokens a request thinks first (none here: the text is plain)."""

    def __init__(self, pre: bytes) -> None:
        self.pre = pre

    def event(self, out: OutputView, sent: int, n: int) -> bytes:
        """The event for tokens sent..n up to its text's end."""
        return self.pre + orjson.dumps(out.advance(n))


class ChatText:
    """A chat stream's events: with ``think`` > 0 (``--reasoning-tokens``) a request's first ``think`` tokens go
    as ``reasoning_content`` with ``content`` null, as a server's reasoning parser sends a model's thinking, the
    rest as ``content``; a step across the boundary is one event carrying both (SGLang's and vLLM's parsers
    return both halves of such a delta). An event without text is b"": not written, its tokens ride on the next."""

    __slots__ = ("answer", "reason", "both", "think", "thought", "answered")

    def __init__(self, head: bytes, think: int) -> None:
        self.answer = b"data: " + head + b',"choices":[{"index":0,"delta":{"reasoning_content":null,"content":'
        self.reason = b"data: " + head + b',"choices":[{"index":0,"delta":{"content":null,"reasoning_content":'
        self.both = b"data: " + head + b',"choices":[{"index":0,"delta":{"reasoning_content":'
        self.think = think
        self.thought = 0
        """Reasoning tokens of the event just built, until its stamp takes them (``SimServer._stamp``)."""
        self.answered = True
        """Whether that event carried answer text."""

    def event(self, out: OutputView, sent: int, n: int) -> bytes:
        if sent >= self.think:
            delta = out.advance(n)
            return self.answer + orjson.dumps(delta) if delta else b""
        thought = out.advance(min(n, self.think))
        delta = out.advance(n)
        self.thought, self.answered = min(n, self.think) - sent, bool(delta)
        if not thought:
            self.thought = 0  # its tokens go with the answer's text, or with the next event
            return self.answer + orjson.dumps(delta) if delta else b""
        if not delta:
            return self.reason + orjson.dumps(thought)
        return self.both + orjson.dumps(thought) + b',"content":' + orjson.dumps(delta)
