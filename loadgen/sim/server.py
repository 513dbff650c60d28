"""The aiohttp application: SGLang's HTTP API over the simulated scheduler.

In: a :class:`ServerConfig` (profile, mode, time scale, limits). Out: an aiohttp application
serving SGLang's API (wire shapes in docs/simulator.md, from SGLang 0.5.23) over the simulated
scheduler. This module holds the request life (planning, the scheduler, stamping every write
into the request's ground truth); the routes are in ``routes`` (generation) and ``admin``.
With a prefix cache (``ServerConfig.prefix_cache`` > 0) a finished request's prompt and reply go into the
scheduler's cache, and each request's cached tokens are in its truth, /generate's meta_info, the OpenAI
usage (``prompt_tokens_details``) and /metrics.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from loadgen import engines
from loadgen.sim.faults import DIE, HANG, HTTP_STATUS, FaultPlan, FaultSpec
from loadgen.sim.requestplan import make_request
from loadgen.sim.profiles import Profile
from loadgen.sim.prom import METRICS_FLAVOURS, Metrics
from loadgen.sim.promvllm import VllmMetrics
from loadgen.sim.scheduler import QueueFull, Scheduler, SchedulerConfig, SimRequest, now_ns
from loadgen.sim.truth import TruthRecord, TruthStore
from loadgen.sim.admin import AdminRoutes
from loadgen.sim.flight import Flight
from loadgen.sim.routes import GenerationRoutes
from loadgen.sim.validate import Job, check_context
from loadgen.sim.wire import DONE, QUEUE_FULL, openai_error as _openai_error, sse as _sse
from loadgen.workloads import tokens

STREAM_SHAPES = ("step", "burst")


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
    metrics_flavour: str = METRICS_FLAVOURS[0]
    """The engine (loadgen/engines/) whose /metrics the simulator writes: its series' names, when its counters
    move (its table's ``counted_when``: SGLang's when a request ends, vLLM's per step) and its cache-reset route."""
    faults: FaultSpec | None = None
    """Faults to inject (``--faults``, loadgen.sim.faults); None: none."""
    reasoning_tokens: int = 0
    """The chat route streams each request's first this many output tokens as reasoning (``reasoning_content``
    deltas, content null) and the rest as its answer, as a reasoning model behind a reasoning parser; usage
    counts them in ``reasoning_tokens``. They stay completion tokens: nothing else about the request changes."""
    prefix_cache: int = 0
    """Tokens of prefix cache (``--prefix-cache``, loadgen.sim.prefixcache); 0: none, every prompt prefilled
    whole and ``cached_tokens`` 0 everywhere, as before the cache existed."""




class SimServer(GenerationRoutes, AdminRoutes):
    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.profile = cfg.profile.for_mode(cfg.mode)
        self.context_length = cfg.context_length or cfg.profile.context_length
        self.model_name = cfg.model_name or cfg.profile.model_name
        self.speculative = self.profile.is_speculative(cfg.mode)
        self.adaptive = cfg.adaptive or self.profile.is_adaptive(cfg.mode)
        self.burst = cfg.stream_shape == "burst"
        self.metrics = Metrics()
        self.engine = engines.get(cfg.metrics_flavour)
        # the engine's table says when its counters move: per step (vLLM's scheduler stats, one ITL
        # observation a step output) or when a request ends (SGLang's tokenizer-side counters)
        self.per_step = self.engine.metrics.counted_when == "step"
        self.vmetrics = VllmMetrics(max_model_len=self.context_length) if self.per_step else None
        self.cache_resets = 0
        """Successful /flush_cache or /reset_prefix_cache calls (in /server_info's loadgen_sim)."""
        self.cache_reset_refusals = 0
        self.truth = TruthStore(path=cfg.truth_path)
        self.flights: dict[str, Flight] = {}
        self.sched_cfg = SchedulerConfig(
            profile=self.profile,
            mode=cfg.mode,
            time_scale=cfg.time_scale,
            max_running=cfg.max_running,
            max_queued=cfg.max_queued,
            adaptive=cfg.adaptive,
            prefix_cache=cfg.prefix_cache,
        )
        self.scheduler: Scheduler | None = None
        self.faults = FaultPlan(cfg.faults, cfg.seed) if cfg.faults is not None else None
        self._shutting = asyncio.Event()
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
        reset = self.engine.reset  # the route and method the engine's table names, answered as that engine does
        r.add_route(reset.method, reset.path, self.cache_reset_answers()[reset.path])
        r.add_post("/abort_request", self.abort_request)
        r.add_get("/loadgen/truth", self.truth_endpoint)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.scheduler = Scheduler(self.sched_cfg, self._on_finish)
        self.scheduler.count_cut_drafts = self.engine.metrics.drafts_counted_before_cut
        self.scheduler.start()

    async def _on_shutdown(self, app: web.Application) -> None:
        self._shutting.set()  # a hung request or a fault's wait would hold the shutdown for as long

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

    def _start(self, job: Job, received: int, *, record: bool = True, fault: str = "") -> Flight:
        """Plan and submit; ValueError for what SGLang rejects before scheduling. ``fault``: one to apply to
        the response (loadgen.sim.faults), recorded in the request's truth."""
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
            prefix_cache=self.cfg.prefix_cache > 0,
        )
        fl = Flight(job=job, req=req, out=out, finish=finish, created=int(time.time()), fault=fault)
        req.truth.fault = fault
        self.flights[rid] = fl
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
        if req.prompt_seq is not None and req.produced:
            self._cache_finished(fl)
        if fl.handler_done:
            self._retire(fl)

    def _cache_finished(self, fl: Flight) -> None:
        """SGLang caches a finished request's prompt and output: the next turn of a conversation, whose
        history is this prompt and this reply, finds them. The reply is what the request streamed (its text,
        trimmed at a stop string), as the model wrote it after the prompt: a chat template renders it as
        "Assistant: " + text, and the model's first token carried that space, which the stream trims
        (textgen starts an answer at its first word)."""
        req, out = fl.req, fl.out
        text = out.source.text(0, min(req.produced, out.visible))
        if out.char_cap is not None:
            text = text[: out.char_cap]
        lead = " " if text and not text[0].isspace() and not fl.job.prompt[-1:].isspace() else ""
        self.scheduler.cache.insert(req.prompt_seq + tokens.split(lead + text))

    def _handler_done(self, fl: Flight) -> None:
        """Called in the handler's finally: a vanished client's request is aborted after a delay."""
        fl.handler_done = True
        if fl.req.record:
            self._answered()
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
        if self.per_step:
            self._retire_vllm(fl)
            self.truth.add(t)
            return
        m = self.metrics
        if req.abort_message:
            m.aborted += 1
        # SGLang's tokenizer-side counters (observe_one_finished_request) move when a request ends
        m.requests[fl.job.stream] += 1
        m.prompt_tokens[fl.job.stream] += req.prompt_tokens
        m.cached_tokens += req.cached_tokens
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

    def _retire_vllm(self, fl: Flight) -> None:
        t = fl.req.truth
        done = t.finished_ns or now_ns()
        start = t.admitted_ns or done
        tpot = None
        if t.first_token_ns and fl.req.produced > 1:
            tpot = (done - t.first_token_ns) / 1e9 / (fl.req.produced - 1)
        self.vmetrics.finished(
            t.finish_reason, e2e=(done - t.received_ns) / 1e9, queue=(start - t.received_ns) / 1e9,
            inference=(done - start) / 1e9, tpot=tpot, prompt_tokens=fl.req.prompt_tokens,
            generation_tokens=fl.req.produced,
        )  # fmt: skip

    def _stamp(self, fl: Flight, n_new: int, text=None) -> None:
        """Record one written event in the truth and the latency histograms; ``text``: the chat stream's
        ``routes.ChatText`` that built it, whose reasoning tokens the truth counts."""
        t = now_ns()
        req = fl.req
        self.metrics.events_written += 1
        if not req.record:
            return
        req.truth.events.extend((t, n_new))
        if text is not None and text.think:
            req.truth.reasoning_tokens += text.thought
            if text.answered and n_new > 0 and not req.truth.first_content_ns:
                req.truth.first_content_ns = t
            text.thought, text.answered = 0, True
        if n_new <= 0:
            return
        m = self.vmetrics or self.metrics
        if not fl.first_emit_ns:
            fl.first_emit_ns = t
            req.truth.first_token_ns = t
            ttft = (t - req.truth.received_ns) / 1e9
            if self.per_step:
                m.ttft.observe(ttft)
            else:
                m.ttft[fl.job.stream].observe(ttft)
        elif self.per_step:
            m.itl.observe((t - fl.last_emit_ns) / 1e9)  # vLLM: one observation per step output
        else:
            m.itl.observe((t - fl.last_emit_ns) / 1e9 / n_new, n_new)
        fl.last_emit_ns = t

    # ---- faults (loadgen.sim.faults, docs/simulator.md "Faults") ------------------------

    def _draw_fault(self, stream: bool) -> str:
        return self.faults.draw(stream) if self.faults is not None else ""

    async def _early_fault(self, request: web.Request, job: Job, received: int, fault: str) -> web.StreamResponse:
        """A fault that answers before any stream: an HTTP error status, or a hang that never answers."""
        rec = TruthRecord(rid=job.rid or uuid.uuid4().hex, route=job.route, stream=job.stream, mode=self.cfg.mode,
                          received_ns=received, prompt_tokens=job.prompt_tokens, prompt_kind="", accept_p=0.0,
                          finish_reason=HANG if fault == HANG else "error", fault=fault)
        if fault == HANG:
            self.truth.add(rec)
            await self._fault_wait(None)  # accepted, never answered (until the client goes away)
            _reset(request)  # the server is shutting down
            return web.Response()
        status = HTTP_STATUS[fault]
        message, kind = {
            503: ("Service Unavailable: the server is overloaded (injected fault)", "ServiceUnavailableError"),
            500: ("Internal server error (injected fault)", "InternalServerError"),
            429: ("Too many requests: rate limit exceeded (injected fault)", "RateLimitError"),
        }[status]
        rec.finished_ns = now_ns()
        self.truth.add(rec)
        self._answered()
        return _openai_error(message, kind, status)

    async def _before_headers(self, request: web.Request, fl: Flight) -> bool:
        """slow_headers waits here; a non-streamed reset cuts the connection here (True: return now)."""
        if fl.fault == "slow_headers":
            fl.fault = ""
            await self._fault_wait(self.faults.spec.duration("slow_headers"))
        elif fl.fault == "reset" and not fl.job.stream:
            fl.fault = ""
            self._fault_abort(fl, "reset")
            _reset(request)
            return True
        return False

    async def _midstream_fault(self, request: web.Request, resp: web.StreamResponse, fl: Flight) -> bool:
        """Apply the flight's fault before the next event is written; True: the stream ends here."""
        kind, fl.fault = fl.fault, ""
        if kind == "stall":
            await self._fault_wait(self.faults.spec.duration("stall"))
            return False
        if kind == "malformed":
            await resp.write(MALFORMED)
            return False
        self._fault_abort(fl, kind)
        if kind == "reset":
            _reset(request)
        elif kind == "error_event":
            err = {"error": {"object": "error", "message": "Internal server error: the engine failed mid-stream "
                             "(injected fault)", "type": "InternalServerError", "param": None, "code": 500}}
            await resp.write(_sse(err) + DONE)
        return True  # truncate: the stream ends with neither a finish reason nor [DONE]

    async def _fault_wait(self, seconds: float | None) -> None:
        """A fault's wait (None: for ever), ended early by the server's shutdown."""
        try:
            await asyncio.wait_for(self._shutting.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _fault_abort(self, fl: Flight, kind: str) -> None:
        if not fl.req.finished and self.scheduler is not None:
            self.scheduler.abort(fl.req, f"injected fault: {kind}")

    def _answered(self) -> None:
        if self.faults is not None and self.faults.answer():
            # after this response's last bytes are out: the handler's finally runs before aiohttp writes the
            # end of its body, in the same step of this task; nothing else runs before the exit
            asyncio.get_running_loop().call_soon(self._die)

    def _die(self) -> None:
        """die_after: record every request still in flight (cut by the exit: fault ``die``) and exit at once."""
        now = now_ns()
        for fl in list(self.flights.values()):
            req, t = fl.req, fl.req.truth
            if not req.record:
                continue
            if not fl.handler_done:
                t.fault, t.finish_reason = DIE, "abort"
            else:
                t.finish_reason = "abort" if req.abort_message else fl.finish.type
            t.finished_ns = t.finished_ns or now
            t.completion_tokens = req.produced
            self.truth.add(t)
        self.truth.close()
        print(f"loadgen sim: die_after={self.faults.spec.die_after}: exiting after "
              f"{self.faults.answered} answered requests", file=sys.stderr, flush=True)
        os._exit(3)

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
            "cached_tokens": req.cached_tokens,
        }
        if first:
            meta["response_sent_to_client_ts"] = time.time()
        if done:
            meta["e2e_latency"] = (now_ns() - req.truth.received_ns) / 1e9
            meta.update(self._spec_fields(req))
        return meta

    def _usage(self, fl: Flight, completion: int, keep_nulls: bool, chat: bool = False) -> dict:
        u = {
            "prompt_tokens": fl.req.prompt_tokens,
            "total_tokens": fl.req.prompt_tokens + completion,
            "completion_tokens": completion,
        }
        if self.cfg.prefix_cache:
            # SGLang with --enable-cache-report (vLLM with --enable-prompt-tokens-details)
            u["prompt_tokens_details"] = {"cached_tokens": fl.req.cached_tokens}
        elif keep_nulls:
            u["prompt_tokens_details"] = None
        # the chat route's reasoning parser counts them: SGLang's own field, then OpenAI's
        thought = min(completion, self.cfg.reasoning_tokens) if chat else 0
        u["reasoning_tokens"] = thought
        if keep_nulls:
            u["completion_tokens_details"] = {"reasoning_tokens": thought} if thought else None
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


MALFORMED = b'data: {"text": "an event cut off mid-JSON (injected fault)\n\n'
"""The malformed fault's SSE event: a data line that is not JSON."""


def _reset(request: web.Request) -> None:
    """Cut the connection with a TCP reset (SO_LINGER 0, then close): what a crashed server or proxy does."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, AttributeError):
            pass
    transport.abort()
