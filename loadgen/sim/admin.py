"""The simulated server's admin and info routes: health, models, server info, loads, metrics, truth.

In: HTTP requests. Out: SGLang-shaped JSON (and Prometheus text at ``/metrics``) describing the
simulated server, plus ``/loadgen/truth``, the simulator's own record of what it sent.
A mixin of :class:`loadgen.sim.server.SimServer`.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
from aiohttp import web

from loadgen.engines import sglang, vllm
from loadgen.sim.promvllm import StepCounters
from loadgen.sim.scheduler import now_ns
from loadgen.sim.validate import Job
from loadgen.sim.wire import json_response as _json


class AdminRoutes:
    """Everything that is not generation."""


    async def models(self, request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [self._card()]})

    def _card(self) -> dict:
        return {
            "id": self.model_name,
            "object": "model",
            "created": int(self.started),
            "owned_by": sglang.ENGINE.name,  # the simulator answers as SGLang does
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
            "speculative_adaptive": self.adaptive,
        }

    async def server_info(self, request: web.Request) -> web.Response:
        cap = self.sched_cfg.cap
        stats, cache = self.scheduler.stats, self.scheduler.cache
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
            # SGLang's own switches: its radix cache, and cached_tokens in the OpenAI usage
            "disable_radix_cache": cache is None,
            "enable_cache_report": cache is not None,
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
                "late_ms_sum": stats.late_ns_sum / 1e6,
                "forward_ms_sum": stats.forward_ns_sum / 1e6,
                "metrics_flavour": self.cfg.metrics_flavour,
                "cache_resets": self.cache_resets,
                "prefix_cache": None if cache is None else {"capacity_tokens": cache.capacity_tokens,
                                                            "tokens": len(cache), "evicted": cache.evicted},
                "cache_reset_refusals": self.cache_reset_refusals,
                "faults": None if self.faults is None else {**self.faults.spec.to_dict(),
                                                            "received": self.faults.received,
                                                            "drawn": dict(self.faults.injected)},
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
            "cache_hit_rate": s.stats.last_cache_hit_rate,
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
        if self.per_step:
            text = self._vllm_page(load)
            return web.Response(text=text, content_type="text/plain", charset="utf-8",
                                headers={"X-Prometheus-Format": "0.0.4"})  # fmt: skip
        sched = {
            "num_running_reqs": load["num_running_reqs"],
            "num_queue_reqs": load["num_waiting_reqs"],
            "gen_throughput": s.stats.last_gen_throughput,
            "token_usage": load["token_usage"],
            "num_used_tokens": load["num_used_tokens"],
            "utilization": load["utilization"],
            "is_cuda_graph": 1,
            "cache_hit_rate": load["cache_hit_rate"],
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

    def _vllm_page(self, load: dict) -> str:
        st = self.scheduler.stats
        steps = StepCounters(
            prompt_tokens=st.prompt_tokens_prefilled, generation_tokens=st.generated_tokens,
            cached_tokens=st.prompt_tokens_cached,
            drafts=st.spec_drafts, draft_tokens=st.spec_draft_tokens, accepted=st.spec_accepted,
            accepted_per_pos=tuple(st.spec_accepted_per_pos),
        )  # fmt: skip
        positions = len(st.spec_accepted_per_pos) if self.speculative else None
        return self.vmetrics.render(
            model=self.model_name, running=load["num_running_reqs"], waiting=load["num_waiting_reqs"],
            kv_usage=load["token_usage"], steps=steps, positions=positions,
        )  # fmt: skip

    def cache_reset_answers(self) -> dict:
        """Each engine's cache-reset path (its table's) → how the simulator answers it as that engine does."""
        return {sglang.ENGINE.reset.path: self.flush_cache, vllm.ENGINE.reset.path: self.reset_prefix_cache}

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's POST /reset_prefix_cache (a dev route, VLLM_SERVER_DEV_MODE=1): 200 with no body;
        409 while requests hold blocks unless ?reset_running_requests=true (vLLM >= 0.11)."""
        s = self.scheduler
        force = request.query.get("reset_running_requests", "").lower() in ("1", "true")
        if (s.running or s.waiting) and not force:
            self.cache_reset_refusals += 1
            return _json({"detail": "Prefix cache reset failed."}, 409)
        self._clear_prefix_cache()
        return web.Response(status=200)

    async def flush_cache(self, request: web.Request) -> web.Response:
        s = self.scheduler
        if s.running or s.waiting:
            self.cache_reset_refusals += 1
            msg = (
                "Cache not flushed. Please check the server log for details. "
                f"(#running-req: {len(s.running)}, #queue-req: {len(s.waiting)})"
            )
            return web.Response(status=400, text=msg)
        s.reset_spec_counters()
        self._clear_prefix_cache()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")

    def _clear_prefix_cache(self) -> None:
        """A successful flush or reset: the prefix cache (``--prefix-cache``) starts empty again."""
        self.cache_resets += 1
        if self.scheduler.cache is not None:
            self.scheduler.cache.clear()

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
        """Finished requests' truth (``rid``: one; ``clear``: and forget them); with ``switches=1`` the adaptive
        mode's speculation switches instead, ``since_ns <= t_ns < until_ns`` (perf_counter_ns, the client's
        clock; either left out: unbounded), as :meth:`SwitchLog.query` (a mode that never adapts: none)."""
        q = request.query
        if q.get("switches", "0") not in ("0", "", "false"):
            try:
                lo, hi = int(q.get("since_ns", 0)), (int(q["until_ns"]) if "until_ns" in q else None)
            except ValueError:
                return _json({"error": "since_ns and until_ns are integers (perf_counter_ns)"}, 400)
            return _json(self.scheduler.switches.query(lo, hi))
        clear = q.get("clear", "0") not in ("0", "", "false")
        return _json(self.truth.query(rid=q.get("rid"), clear=clear))

