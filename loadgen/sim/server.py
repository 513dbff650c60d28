"""The aiohttp application: SGLang's HTTP API over the simulated scheduler.

Wire shapes follow shared/research/sglang-protocol.md (0.5.23): /generate sends
headers at once and streams cumulative text (deltas with
--incremental-streaming-output); the OpenAI routes hold headers until the first
token exists. Handlers only format and write; all timing comes from the
scheduler, and every write is stamped into the request's ground truth.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from loadgen.sim.requestplan import Finish, make_request
from loadgen.sim.profiles import Profile
from loadgen.sim.prom import Metrics
from loadgen.sim.scheduler import QueueFull, Scheduler, SchedulerConfig, SimRequest, now_ns
from loadgen.sim.textgen import OutputView
from loadgen.sim.truth import TruthStore
from loadgen.sim.validate import (
    BadRequest,
    Job,
    SchemaError,
    check_context,
    parse_chat,
    parse_completions,
    parse_generate,
)

STREAM_SHAPES = ("step", "burst")
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"
QUEUE_FULL = "The request queue is full."


@dataclass(frozen=True)
class ServerConfig:
    profile: Profile
    mode: str = "baseline"
    time_scale: float = 1.0
    seed: int = 0
    max_running: int = 0
    max_queued: int | None = None
    incremental: bool = False
    adaptive: bool = False
    truth_path: Path | None = None
    context_length: int = 0
    """0 = the profile's."""
    model_name: str = ""
    """'' = the profile's."""
    abort_delay_s: float = 2.0
    """SGLang aborts a disconnected request only after this long (before time-scaling)."""
    host: str = "127.0.0.1"
    port: int = 0
    stream_shape: str = "step"
    """How a step's tokens reach a stream: "step" = one event carrying all of them (SGLang, vLLM);
    "burst" = one event per token, a step's tokens written back to back (llama.cpp, whose accepted
    drafts arrive as separate events microseconds apart)."""


@dataclass(eq=False, slots=True)
class Flight:
    """A request in flight: its scheduler half, what the client sees, and who finishes last."""

    job: Job
    req: SimRequest
    out: OutputView
    finish: Finish
    created: int
    handler_done: bool = False
    last_emit_ns: int = 0
    first_emit_ns: int = 0


def _openai_error(message: str, type_: str, code: int) -> web.Response:
    body = {"object": "error", "message": message, "type": type_, "param": None, "code": code}
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


def _json(obj: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type="application/json")


def _sse(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class SimServer:
    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.profile = cfg.profile
        self.context_length = cfg.context_length or cfg.profile.context_length
        self.model_name = cfg.model_name or cfg.profile.model_name
        self.speculative = cfg.mode == "spec"
        self.burst = cfg.stream_shape == "burst"
        self.metrics = Metrics()
        self.truth = TruthStore(path=cfg.truth_path)
        self.flights: dict[str, Flight] = {}
        self.sched_cfg = SchedulerConfig(
            profile=cfg.profile,
            mode=cfg.mode,
            time_scale=cfg.time_scale,
            max_running=cfg.max_running,
            max_queued=cfg.max_queued,
            adaptive=cfg.adaptive,
        )
        self.scheduler: Scheduler | None = None
        self._counter = 0
        self.port = cfg.port
        """The bound port, set by whoever starts listening."""
        self.started = time.time()
        self.app = self._build_app()

    # ---- app ---------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024 * 1024)
        r = app.router
        r.add_route("POST", "/generate", self.generate)
        r.add_route("PUT", "/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat)
        r.add_get("/v1/models", self.models)
        r.add_get("/v1/models/{model_id:.+}", self.model_card)
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        r.add_get("/ready", self.ready)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/model_info", self.model_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_get("/v1/loads", self.loads)
        r.add_get("/metrics", self.prometheus)
        r.add_route("*", "/flush_cache", self.flush_cache)
        r.add_post("/abort_request", self.abort_request)
        r.add_get("/loadgen/truth", self.truth_endpoint)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.scheduler = Scheduler(self.sched_cfg, self._on_finish)
        self.scheduler.start()

    async def _on_cleanup(self, app: web.Application) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()
        self.truth.close()

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        self.metrics.http_requests += 1
        self.metrics.http_active += 1
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # never let one bad request take the server down
            return _openai_error(f"Internal server error: {exc!r}", "InternalServerError", 500)
        finally:
            self.metrics.http_active -= 1

    # ---- request life ------------------------------------------------------------------

    def _start(self, job: Job, received: int, *, record: bool = True) -> Flight:
        """Plan and submit; ValueError for what SGLang rejects before scheduling."""
        rid = job.rid or uuid.uuid4().hex
        if rid in self.flights:
            raise ValueError(f"Duplicate request ID detected: {rid}")
        max_new = check_context(job, self.context_length)
        self._counter += 1
        req, out, finish = make_request(
            job,
            rid=rid,
            profile=self.profile,
            mode=self.cfg.mode,
            seed=self.cfg.seed,
            counter=self._counter,
            max_new=max_new,
            received_ns=received,
            record=record,
        )
        fl = Flight(job=job, req=req, out=out, finish=finish, created=int(time.time()))
        self.flights[rid] = fl
        if record:
            m = self.metrics
            m.requests[job.stream] += 1
            m.prompt_tokens[job.stream] += job.prompt_tokens
        try:
            self.scheduler.submit(req)
        except QueueFull:
            req.abort_message, req.abort_status = QUEUE_FULL, 503
            req.finished = True
            req.truth.finished_ns = now_ns()
            self._on_finish(req)
        return fl

    def _on_finish(self, req: SimRequest) -> None:
        fl = self.flights.get(req.rid)
        if fl is None:
            return
        if fl.handler_done:
            self._retire(fl)

    def _handler_done(self, fl: Flight) -> None:
        """Called in the handler's finally: a vanished client's request is aborted after a delay."""
        fl.handler_done = True
        req = fl.req
        if req.finished:
            self._retire(fl)
        else:
            delay = self.cfg.abort_delay_s / self.cfg.time_scale
            asyncio.get_running_loop().call_later(delay, self._abort_disconnected, req)

    def _abort_disconnected(self, req: SimRequest) -> None:
        if not req.finished and self.scheduler is not None:
            self.scheduler.abort(req, "Request is disconnected from the client side.")

    def _retire(self, fl: Flight) -> None:
        if self.flights.get(fl.req.rid) is fl:
            del self.flights[fl.req.rid]
        req = fl.req
        if not req.record:
            return
        t = req.truth
        t.completion_tokens = req.produced
        t.verify_ct = req.verify_ct
        t.accepted_drafts = req.accepted
        t.proposed_drafts = req.verify_ct * (self.profile.spec.num_draft_tokens - 1) if self.speculative else 0
        t.finish_reason = "abort" if req.abort_message else fl.finish.type
        m = self.metrics
        if req.abort_message:
            m.aborted += 1
        m.generation_tokens[fl.job.stream] += req.produced
        m.spec_verify_calls += req.verify_ct
        if t.first_token_ns:
            e2e = (t.finished_ns - t.received_ns) / 1e9
            m.e2e[fl.job.stream].observe(max(0.0, e2e))
            if req.produced > 1:
                ttft = (t.first_token_ns - t.received_ns) / 1e9
                m.tpot[fl.job.stream].observe(max(0.0, (e2e - ttft) / (req.produced - 1)))
        if t.admitted_ns:
            m.queue_time.observe((t.admitted_ns - t.received_ns) / 1e9)
        self.truth.add(t)

    def _stamp(self, fl: Flight, n_new: int) -> None:
        """Record one written event in the truth and the latency histograms."""
        t = now_ns()
        req = fl.req
        self.metrics.events_written += 1
        if not req.record:
            return
        req.truth.events.extend((t, n_new))
        if n_new <= 0:
            return
        m = self.metrics
        if not fl.first_emit_ns:
            fl.first_emit_ns = t
            req.truth.first_token_ns = t
            m.ttft[fl.job.stream].observe((t - req.truth.received_ns) / 1e9)
        else:
            m.itl.observe((t - fl.last_emit_ns) / 1e9 / n_new, n_new)
        fl.last_emit_ns = t

    # ---- shared pieces -----------------------------------------------------------------

    def _finish_reason(self, fl: Flight) -> dict | None:
        req = fl.req
        if not req.finished:
            return None
        if req.abort_message:
            return {"type": "abort", "message": req.abort_message, "status_code": req.abort_status, "err_type": None}
        if fl.finish.type == "length":
            return {"type": "length", "length": req.produced}
        return {"type": "stop", "matched": fl.finish.matched}

    def _spec_fields(self, req: SimRequest) -> dict:
        if not self.speculative or req.verify_ct == 0:
            return {}
        proposed = req.verify_ct * (self.profile.spec.num_draft_tokens - 1)
        return {
            "spec_accept_rate": req.accepted / proposed if proposed else 0.0,
            "spec_accept_length": req.produced / req.verify_ct,
            "spec_verify_ct": req.verify_ct,
            "spec_num_correct_drafts": req.accepted,
            "spec_num_proposed_drafts": proposed,
            "spec_correct_drafts_histogram": list(req.histogram),
        }

    def _meta(self, fl: Flight, n: int, first: bool, partial: bool = False) -> dict:
        """``partial``: an event before the last of a burst, which never carries the finish."""
        req = fl.req
        done = req.finished and not partial
        meta = {
            "id": req.rid,
            "finish_reason": self._finish_reason(fl) if done else None,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": n,
            "cached_tokens": 0,
        }
        if first:
            meta["response_sent_to_client_ts"] = time.time()
        if done:
            meta["e2e_latency"] = (now_ns() - req.truth.received_ns) / 1e9
            meta.update(self._spec_fields(req))
        return meta

    def _usage(self, fl: Flight, completion: int, keep_nulls: bool) -> dict:
        u = {
            "prompt_tokens": fl.req.prompt_tokens,
            "total_tokens": fl.req.prompt_tokens + completion,
            "completion_tokens": completion,
        }
        if keep_nulls:
            u["prompt_tokens_details"] = None
        u["reasoning_tokens"] = 0
        if keep_nulls:
            u["completion_tokens_details"] = None
        return u

    def _spec_details(self, req: SimRequest) -> dict:
        f = self._spec_fields(req)
        return {
            "spec_accept_rate": f.get("spec_accept_rate", 0.0),
            "spec_accept_length": f.get("spec_accept_length", 0.0),
            "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": f.get("spec_num_correct_drafts", 0),
            "spec_num_proposed_drafts": f.get("spec_num_proposed_drafts", 0),
            "spec_verify_ct": f.get("spec_verify_ct", 0),
            "spec_correct_drafts_histogram": f.get("spec_correct_drafts_histogram", []),
            "spec_cap_lens_histogram": [],
        }

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
            fl = self._start(job, received)
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
        try:
            if job.stream:
                return await self._generate_stream(request, fl)
            await fl.req.wait_change(1 << 62)
            req = fl.req
            if req.abort_status is not None:
                return _openai_error(req.abort_message or "", str(req.abort_status), req.abort_status)
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
        await resp.prepare(request)  # headers at once, as SGLang's /generate does
        req, out = fl.req, fl.out
        incremental = self.cfg.incremental
        sent = 0
        while True:
            await req.wait_change(sent)
            n = req.produced
            if n == sent and not req.finished:
                continue
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
        try:
            fl = self._start(job, received)
        except ValueError as exc:
            return _openai_error(str(exc), "BadRequestError", 400)
        try:
            if job.stream:
                return await self._openai_stream(request, fl, chat)
            await fl.req.wait_change(1 << 62)
            req = fl.req
            if req.abort_status is not None:
                return _openai_error(req.abort_message or "", str(req.abort_status), req.abort_status)
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
        fl.out.advance(req.produced)
        reason, matched = self._openai_finish(fl)
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": fl.out.text, "reasoning_content": None, "tool_calls": None},
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
                "usage": self._usage(fl, req.produced, True),
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
            pre = b"data: " + head + b',"choices":[{"index":0,"delta":{"reasoning_content":null,"content":'
            post = b'},"logprobs":null,"finish_reason":null,"matched_stop":null}]'
            role = (
                b"data: " + head + b',"choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}\n\n'
            )
        else:
            pre = b"data: " + head + b',"choices":[{"index":0,"text":'
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
            if self.burst:
                # llama.cpp's shape: every token but the step's last its own event, written back to back
                for m in range(sent + 1, n):
                    d = out.advance(m)
                    if chat and not d:
                        continue  # no text for it (a trimmed stop string): the next event carries it
                    usage = b',"usage":' + orjson.dumps(self._usage(fl, m, chat)) if job.continuous_usage else usage_null
                    ev = pre + orjson.dumps(d) + post + usage + b"}\n\n"
                    await resp.write(role + ev if first and chat else ev)
                    first = False
                    self._stamp(fl, m - sent)
                    sent = m
            delta = out.advance(n)
            parts: list[bytes] = []
            if first and chat:
                parts.append(role)
            first = False
            usage = (
                b',"usage":' + orjson.dumps(self._usage(fl, n, chat)) if job.continuous_usage else usage_null
            )
            if not chat and req.finished:
                reason, matched = self._openai_finish(fl)
                fin = orjson.dumps({"finish_reason": reason, "matched_stop": matched})[1:-1]
                parts.append(pre + orjson.dumps(delta) + b',"logprobs":null,' + fin + b"}]" + usage + b"}\n\n")
            elif n > sent and (delta or not chat):
                parts.append(pre + orjson.dumps(delta) + post + usage + b"}\n\n")
            if req.finished:
                parts.append(self._stream_tail(fl, head, chat, usage_only=False))
            await resp.write(b"".join(parts))
            self._stamp(fl, n - sent)
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
            usage = orjson.dumps({"choices": [], "usage": self._usage(fl, req.produced, chat)})[1:]
            parts.append(b"data: " + head + b"," + usage + b"\n\n")
        parts.append(DONE)
        return b"".join(parts)

    # ---- admin and info ----------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [self._card()]})

    def _card(self) -> dict:
        return {
            "id": self.model_name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "sglang",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.context_length,
        }

    async def model_card(self, request: web.Request) -> web.Response:
        mid = request.match_info["model_id"]
        if mid != self.model_name:
            err = {"message": f"The model '{mid}' does not exist", "type": "invalid_request_error",
                   "param": "model", "code": "model_not_found"}  # fmt: skip
            return _json({"error": err}, 404)
        return _json(self._card())

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health(self, request: web.Request) -> web.Response:
        """SGLang's health check: a 1-token generate, at least ~1 s (time-scaled), 503 after 20 s."""
        scale = self.cfg.time_scale
        job = Job(route="generate", prompt="", prompt_tokens=1, max_new_tokens=1, stream=False,
                  rid=f"HEALTH_CHECK_{uuid.uuid4().hex}", ignore_eos=True, temperature=0.0)  # fmt: skip
        try:
            fl = self._start(job, now_ns(), record=False)
        except ValueError:
            return web.Response(status=503)
        try:
            done = asyncio.ensure_future(fl.req.wait_change(1 << 62))
            await asyncio.sleep(1.0 / scale)
            try:
                await asyncio.wait_for(done, timeout=19.0 / scale)
            except asyncio.TimeoutError:
                return web.Response(status=503)
            return web.Response(status=200 if fl.req.abort_status is None else 503)
        finally:
            self._handler_done(fl)

    def _spec_args(self) -> dict:
        s = self.profile.spec
        on = self.speculative
        return {
            "speculative_algorithm": s.algorithm if on else None,
            "speculative_num_steps": s.num_steps if on else None,
            "speculative_eagle_topk": s.eagle_topk if on else None,
            "speculative_num_draft_tokens": s.num_draft_tokens if on else None,
            "speculative_adaptive": self.cfg.adaptive,
        }

    async def server_info(self, request: web.Request) -> web.Response:
        cap = self.sched_cfg.cap
        stats = self.scheduler.stats
        internal = {
            "world_size": 1,
            "max_running_requests": cap,
            "effective_max_running_requests_per_dp": cap,
            "last_gen_throughput": stats.last_gen_throughput,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "graph": 0.0, "token_capacity": self._token_capacity()},
        }
        if self.speculative and stats.avg_spec_accept_length is not None:
            internal["avg_spec_accept_length"] = stats.avg_spec_accept_length
        info = {
            "model_path": self.model_name,
            "served_model_name": self.model_name,
            "tokenizer_path": self.model_name,
            "host": self.cfg.host,
            "port": self.port,
            "tp_size": 1,
            "dp_size": 1,
            "max_running_requests": cap,
            "max_queued_requests": self.cfg.max_queued,
            **self._spec_args(),
            "stream_interval": 1,
            "incremental_streaming_output": self.cfg.incremental,
            "context_length": self.context_length,
            "schedule_policy": "fcfs",
            "max_total_num_tokens": self._token_capacity(),
            "max_req_input_len": self.context_length - 1,
            "max_prefill_tokens": self.profile.max_prefill_tokens,
            "launch_command": f"loadgen sim --profile {self.profile.name} --mode {self.cfg.mode}",
            "kv_events": None,
            "startup_time": self.started,
            "version": "0.5.23-loadgen-sim",
            "frontend": "python",
            "loadgen_sim": {
                "profile": self.profile.name,
                "mode": self.cfg.mode,
                "time_scale": self.cfg.time_scale,
                "seed": self.cfg.seed,
                "stream_shape": self.cfg.stream_shape,
                "generated_tokens": stats.generated_tokens,
                "events_written": self.metrics.events_written,
                "forwards": stats.steps,
                "late_forwards": stats.late_steps,
                "max_late_ms": stats.max_late_ns / 1e6,
                "now_ns": now_ns(),
            },
            "internal_states": [internal],
        }
        return _json(info)

    def _token_capacity(self) -> int:
        return self.sched_cfg.cap * self.context_length

    async def model_info(self, request: web.Request) -> web.Response:
        return _json({
            "model_path": self.model_name,
            "served_model_name": self.model_name,
            "tokenizer_path": self.model_name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "simulated",
            "architectures": ["SimulatedForCausalLM"],
        })  # fmt: skip

    def _load(self) -> dict:
        s = self.scheduler
        used = sum(r.prompt_tokens + r.produced for r in s.running)
        cap_tokens = self._token_capacity()
        load = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "dp_rank": 0,
            "num_running_reqs": len(s.running),
            "num_waiting_reqs": len(s.waiting),
            "num_waiting_uncached_tokens": sum(r.prompt_tokens for r in s.waiting),
            "num_used_tokens": used,
            "num_total_tokens": cap_tokens,
            "num_active_tokens": used,
            "max_total_num_tokens": cap_tokens,
            "max_running_requests": self.sched_cfg.cap,
            "token_usage": used / cap_tokens if cap_tokens else 0.0,
            "gen_throughput": s.stats.last_gen_throughput,
            "cache_hit_rate": 0.0,
            "utilization": len(s.running) / self.sched_cfg.cap,
            "memory": {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": cap_tokens},
            "queues": {"waiting": len(s.waiting), "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
        }
        if self.speculative:
            load["speculative"] = {
                "accept_length": s.stats.last_accept_length or 0.0,
                "accept_rate": s.stats.last_accept_rate or 0.0,
            }
        return load

    async def loads(self, request: web.Request) -> web.Response:
        load = self._load()
        if request.query.get("format") == "prometheus":
            lines = [
                f'sglang_{k}{{dp_rank="0"}} {v}' for k, v in load.items() if isinstance(v, (int, float)) and k != "dp_rank"
            ]
            for k, v in load.get("speculative", {}).items():
                lines.append(f'sglang_spec_{k}{{dp_rank="0"}} {v}')
            return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
        return _json({
            "timestamp": load["timestamp"],
            "version": "0.5.23-loadgen-sim",
            "accelerator": "simulated",
            "num_accelerators": 0,
            "loads": [load],
        })  # fmt: skip

    async def prometheus(self, request: web.Request) -> web.Response:
        s = self.scheduler
        load = self._load()
        sched = {
            "num_running_reqs": load["num_running_reqs"],
            "num_queue_reqs": load["num_waiting_reqs"],
            "gen_throughput": s.stats.last_gen_throughput,
            "token_usage": load["token_usage"],
            "num_used_tokens": load["num_used_tokens"],
            "utilization": load["utilization"],
            "is_cuda_graph": 1,
            "max_total_num_tokens": load["max_total_num_tokens"],
            "context_len": self.context_length,
        }
        spec = None
        if self.speculative:
            spec = {
                "spec_accept_length": s.stats.last_accept_length or 0.0,
                "spec_accept_rate": s.stats.last_accept_rate or 0.0,
                "spec_num_steps": self.profile.spec.num_steps,
                "spec_num_draft_tokens": self.profile.spec.num_draft_tokens,
            }
        text = self.metrics.render(model=self.model_name, sched=sched, spec=spec)
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})  # fmt: skip

    async def flush_cache(self, request: web.Request) -> web.Response:
        s = self.scheduler
        if s.running or s.waiting:
            msg = (
                "Cache not flushed. Please check the server log for details. "
                f"(#running-req: {len(s.running)}, #queue-req: {len(s.waiting)})"
            )
            return web.Response(status=400, text=msg)
        s.reset_spec_counters()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")

    async def abort_request(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
        except orjson.JSONDecodeError as exc:
            return _json({"error": f"Failed to parse the request body as JSON: {exc}"}, 400)
        if not isinstance(body, dict):
            return _json({"error": "invalid type: expected struct AbortReq"}, 400)
        rid = body.get("rid") or ""
        abort_all = bool(body.get("abort_all", False))
        if rid or abort_all:
            # SGLang matches by prefix
            for fl in [f for r, f in self.flights.items() if abort_all or r.startswith(rid)]:
                self.scheduler.abort(fl.req, "Aborted", None)
        return web.Response(status=200)

    async def truth_endpoint(self, request: web.Request) -> web.Response:
        q = request.query
        clear = q.get("clear", "0") not in ("0", "", "false")
        return _json(self.truth.query(rid=q.get("rid"), clear=clear))

