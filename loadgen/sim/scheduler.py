"""The continuous-batching loop: one asyncio task times every forward from the cost model.

Like SGLang's default scheduler: a FIFO waiting queue in front of a running
batch capped at max-running-requests; whenever requests wait and there is room,
the next forward is a prefill of the admitted ones (the decode batch pauses for
it), otherwise a decode step (or a speculative draft+verify step) over the whole
batch. Each forward ends at an absolute deadline t0 + sum(durations), so the
schedule never drifts however late the event loop wakes; each request gets all
of the step's tokens at once, and its HTTP handler writes them as one event.

An adaptive mode keeps its speculation state between steps: off once the batch
reaches spec.adaptive_off_batch, back on only below adaptive_off_batch - adaptive_band
(band 0: the naive threshold, read anew every step); each change is a SpecSwitch in
``switches`` and costs its step spec.adaptive_switch_ms more. With a prefix cache
(``prefix_cache`` > 0, loadgen.sim.prefixcache) a request's prompt is matched when it is
admitted, as SGLang matches at scheduling, its prefill costs only its uncached tokens,
and its prompt is cached once the prefill ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field

from loadgen.sim import model
from loadgen.sim.prefixcache import PrefixCache
from loadgen.sim.profiles import Profile
from loadgen.sim.truth import SpecSwitch, SwitchLog, TruthRecord

now_ns = time.perf_counter_ns


class QueueFull(Exception):
    """The waiting queue is at --max-queued-requests."""


@dataclass(frozen=True)
class SchedulerConfig:
    profile: Profile
    mode: str
    """One of the profile's modes (Profile.modes())."""
    time_scale: float = 1.0
    max_running: int = 0
    """0 = the profile's default for the mode."""
    max_queued: int | None = None
    adaptive: bool = False
    decode_log_interval: int = 40
    """SGLang refreshes its accept-length and throughput gauges every this many decode steps."""
    prefix_cache: int = 0
    """Tokens the prefix cache holds (loadgen.sim.prefixcache); 0: no cache, every prompt prefilled whole."""

    @property
    def cap(self) -> int:
        return self.max_running or self.profile.max_running(self.mode)

    @property
    def speculative(self) -> bool:
        return self.profile.is_speculative(self.mode)

    @property
    def adaptive_on(self) -> bool:
        """--speculative-adaptive, or a mode that is adaptive by itself."""
        return self.adaptive or self.profile.is_adaptive(self.mode)


@dataclass(eq=False, slots=True)
class SimRequest:
    """One request's life in the scheduler; its handler reads ``produced`` and ``finished``."""

    rid: str
    prompt_tokens: int
    target_tokens: int
    """Tokens it will produce unless aborted (includes a natural EOS token)."""
    finish_type: str
    """'length' or 'stop' once target_tokens are out."""
    accept_p: float
    rng: random.Random
    truth: TruthRecord
    record: bool = True
    """False for health-check probes (SGLang leaves them out of metrics)."""
    prompt_seq: list[str] | None = None
    """The prompt's tokens (loadgen.workloads.tokens.split) when the prefix cache is on and the prompt is text."""
    cached_tokens: int = 0
    """Prompt tokens the prefix cache held when it was admitted (its prefill skipped them)."""
    produced: int = 0
    verify_ct: int = 0
    accepted: int = 0
    histogram: list[int] = field(default_factory=list)
    finished: bool = False
    abort_message: str | None = None
    abort_status: int | None = None
    abort_pending: bool = False
    _waiter: asyncio.Future | None = None
    _seen: int = 0

    def notify(self) -> None:
        w = self._waiter
        # wake the handler only when what it waits for exists: a non-streaming handler sleeps to the end
        if w is not None and (self.produced > self._seen or self.finished) and not w.done():
            w.set_result(None)

    async def wait_change(self, seen: int) -> None:
        """Return once more than ``seen`` tokens exist or the request has finished."""
        while self.produced <= seen and not self.finished:
            self._seen = seen
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None


LATE_NS = 2_000_000
"""A forward is late from 2 ms past its deadline: the timers alone account for up to ~1 ms (a sleep asks
for the next whole ms; this 2-core VM's asyncio wake-up p99 was 1.1 ms)."""


@dataclass
class Stats:
    """Counters behind /metrics, /server_info and /v1/loads."""

    decode_steps: int = 0
    generated_tokens: int = 0
    window_tokens: int = 0
    window_start_ns: int = 0
    window_verify: int = 0
    window_accept_tokens: int = 0
    window_drafts_ok: int = 0
    window_drafts_proposed: int = 0
    lifetime_verify: int = 0
    lifetime_accept_tokens: int = 0
    last_gen_throughput: float = 0.0
    last_accept_length: float | None = None
    last_accept_rate: float | None = None
    avg_spec_accept_length: float | None = None
    """Set at the first decode-log tick, as SGLang does; reset by flush_cache."""
    prompt_tokens_prefilled: int = 0
    """Prompt tokens of requests whose prefill produced their first token (vLLM's per-step count)."""
    spec_drafts: int = 0
    """Verify steps that carried a draft, one per request per speculative step (vLLM's num_drafts)."""
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    """[k]: verify steps whose (k+1)-th drafted token was accepted; never increasing in k."""
    steps: int = 0
    late_steps: int = 0
    """Forwards that ended more than 2 ms after their deadline (the process was starved of CPU)."""
    max_late_ns: int = 0
    late_ns_sum: int = 0
    """Sum over the late forwards of how far past LATE_NS each ended: the simulator's lost clock."""
    forward_ns_sum: int = 0
    """Sum over forwards of their modelled wall durations; late_ns_sum over it is how many forwards
    behind its model the simulator ran, on average (loadgen.serverview.simclock)."""
    prompt_tokens_cached: int = 0
    """Of prompt_tokens_prefilled, those the prefix cache held (vLLM's prefix cache hits, per step)."""
    last_cache_hit_rate: float = 0.0
    """Cached over all prompt tokens of the last prefill forward (SGLang's cache_hit_rate gauge, per prefill log)."""


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, on_finish) -> None:
        self.profile = cfg.profile.for_mode(cfg.mode)
        self.cfg = cfg = dataclasses.replace(cfg, profile=self.profile)
        self._spec_mode = cfg.speculative
        self._adaptive = cfg.adaptive_on
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = Stats(window_start_ns=now_ns())
        self._on_finish = on_finish
        self._wake = asyncio.Event()
        self._ns_per_ms = 1e6 / cfg.time_scale
        spec = self.profile.spec
        self._max_accept = model.max_accept(spec)
        self._proposed = spec.num_draft_tokens - 1
        self._branches = model.branches(spec)
        self.stats.spec_accepted_per_pos = [0] * self._max_accept
        self.spec_on = self._spec_mode
        """The speculation state: what the last decode step ran (an adaptive mode keeps it between steps)."""
        self._step_spec = self.spec_on
        self._step_switched = False
        """The planned decode step's state, and whether it changes spec_on (its end is the switch's instant)."""
        self.switches = SwitchLog()
        self.count_cut_drafts = False
        """Count a step's accepted drafts before the cut at max_new_tokens (vLLM's counters do; the server
        sets it from its engine's table)."""
        self.cache = PrefixCache(cfg.prefix_cache) if cfg.prefix_cache > 0 else None
        """The prefix cache, or None: off (the default), one None test on the admission path."""
        self._task: asyncio.Task | None = None

    # ---- requests in -------------------------------------------------------------------

    def submit(self, req: SimRequest) -> None:
        if self.cfg.max_queued is not None and len(self.waiting) >= self.cfg.max_queued:
            raise QueueFull
        if not req.histogram:
            req.histogram = [0] * (self._max_accept + 1)
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: SimRequest, message: str = "Aborted", status: int | None = None) -> None:
        """Waiting: leave the queue now. Running: finish at the end of the current forward."""
        if req.finished:
            return
        req.abort_message, req.abort_status = message, status
        try:
            self.waiting.remove(req)
        except ValueError:
            req.abort_pending = True
            return
        self._finish(req, now_ns())

    def _finish(self, req: SimRequest, t: int) -> None:
        req.finished = True
        req.truth.finished_ns = t
        req.notify()
        self._on_finish(req)

    # ---- the loop ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def _speculating(self, batch: int) -> bool:
        """Whether a decode step over ``batch`` speculates, from the state the last step left."""
        if not self._spec_mode:
            return False
        if not self._adaptive:
            return True
        spec = self.profile.spec
        if self.spec_on:
            return batch < spec.adaptive_off_batch
        return batch < spec.adaptive_off_batch - spec.adaptive_band

    async def _run(self) -> None:
        deadline = now_ns()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                deadline = now_ns()  # idle time is not owed to the schedule
            admitted, ms = self.next_forward()
            step_ns = int(ms * self._ns_per_ms)
            deadline += step_ns
            delay = deadline - now_ns()
            if delay > 0:
                # event-loop timers tick in whole milliseconds (uvloop rounds to the nearest, so it
                # can wake early): ask for the next whole ms so a step never ends before its deadline
                await asyncio.sleep(math.ceil(delay / 1e6) / 1e3)
            else:
                await asyncio.sleep(0)  # late: run at once, but let handlers write first
            t = now_ns()
            self._lateness(t - deadline, step_ns)
            self.complete_forward(admitted, t)

    def next_forward(self) -> tuple[list[SimRequest], float]:
        """The forward to run next: a prefill of the admitted requests, or a decode step; its cost in ms."""
        admitted = self._admit()
        if admitted:
            tokens = sum(r.prompt_tokens - r.cached_tokens for r in admitted)
            return admitted, model.prefill_ms(self.profile.cost, tokens, self._spec_mode)
        batch = len(self.running)
        on = self._step_spec = self._speculating(batch)
        self._step_switched = on != self.spec_on
        switch_ms = self.profile.spec.adaptive_switch_ms if self._step_switched else 0.0
        if on:
            return admitted, model.spec_step_ms(self.profile.cost, self.profile.spec, batch) + switch_ms
        return admitted, model.decode_ms(self.profile.cost, batch) + switch_ms

    def complete_forward(self, admitted: list[SimRequest], t: int) -> None:
        """Apply a finished forward at time ``t``: first tokens after a prefill, step tokens after a decode."""
        if admitted:
            self._after_prefill(admitted, t)
        else:
            self._after_decode(t)

    def _lateness(self, late_ns: int, step_ns: int) -> None:
        s = self.stats
        s.steps += 1
        s.forward_ns_sum += step_ns
        if late_ns > LATE_NS:
            s.late_steps += 1
            s.late_ns_sum += late_ns - LATE_NS
        if late_ns > s.max_late_ns:
            s.max_late_ns = late_ns

    def _admit(self) -> list[SimRequest]:
        room = self.cfg.cap - len(self.running)
        budget = self.profile.max_prefill_tokens
        out: list[SimRequest] = []
        t = now_ns()
        cache = self.cache
        while self.waiting and room > 0:
            req = self.waiting[0]
            if cache is not None and req.prompt_seq is not None:
                # matched when scheduled, as SGLang's radix cache: the budget counts the tokens to compute
                req.cached_tokens = req.truth.cached_tokens = cache.match(req.prompt_seq)
            if out and req.prompt_tokens - req.cached_tokens > budget:
                break  # the rest goes in the next prefill forward, as chunked prefill would
            self.waiting.popleft()
            req.truth.admitted_ns = t
            out.append(req)
            budget -= req.prompt_tokens - req.cached_tokens
            room -= 1
        return out

    def _after_prefill(self, admitted: list[SimRequest], t: int) -> None:
        cache = self.cache
        if cache is not None:
            self._cache_prefilled(cache, admitted)
        for req in admitted:
            if req.abort_pending:
                self._finish(req, t)
                continue
            if req.target_tokens <= 0:
                self._finish(req, t)
                continue
            req.produced = 1  # prefill samples the first token
            if req.record:
                req.truth.steps.extend((t, 1))
                self.stats.generated_tokens += 1
                self.stats.prompt_tokens_prefilled += req.prompt_tokens
                self.stats.prompt_tokens_cached += req.cached_tokens
            if req.target_tokens <= 1:
                self._finish(req, t)
            else:
                self.running.append(req)
                req.notify()

    def _cache_prefilled(self, cache: PrefixCache, admitted: list[SimRequest]) -> None:
        """The prompts of a finished prefill forward are in the KV cache now: later requests can reuse them."""
        total = cached = 0
        for req in admitted:
            if req.prompt_seq is not None:
                cache.insert(req.prompt_seq)
            if req.record:
                total += req.prompt_tokens
                cached += req.cached_tokens
        if total:
            self.stats.last_cache_hit_rate = cached / total

    def _after_decode(self, t: int) -> None:
        running = self.running
        batch = len(running)
        speculating = self._step_spec
        if self._step_switched:
            self.spec_on, self._step_switched = speculating, False
            self.switches.add(SpecSwitch(t, speculating, batch))
        max_accept, branches = self._max_accept, self._branches
        stats = self.stats
        step_tokens = 0
        drafts_ok = 0
        counted_ok = 0
        verified = 0
        per_pos = stats.spec_accepted_per_pos
        count_cut = self.count_cut_drafts
        still: list[SimRequest] = []
        for req in running:
            if req.abort_pending:
                self._finish(req, t)
                continue
            if speculating:
                # a chain of drafts is accepted up to its first miss; with several branches per depth
                # a depth survives if any branch matches (model.per_depth_prob)
                q = req.accept_p if branches == 1.0 else 1.0 - (1.0 - req.accept_p) ** branches
                rnd = req.rng.random
                k = 0
                while k < max_accept and rnd() < q:
                    k += 1
                counted = k
                left = req.target_tokens - req.produced
                if k >= left:
                    k = left - 1  # drafts past max_new_tokens are dropped from the output
                if not count_cut:
                    counted = k  # and count as unused
                req.verify_ct += 1
                req.accepted += k
                req.histogram[k] += 1
                drafts_ok += k
                counted_ok += counted
                verified += 1
                for i in range(counted):  # the accepted drafts are the first positions of the chain
                    per_pos[i] += 1
                n = k + 1
            else:
                n = 1
            req.produced += n
            step_tokens += n
            if req.record:
                req.truth.steps.extend((t, n))
            if req.produced >= req.target_tokens:
                self._finish(req, t)
            else:
                still.append(req)
                req.notify()
        self.running = still
        if verified:  # per step, as vLLM's SpecDecodingStats: the requests this verify carried
            stats.spec_drafts += verified
            stats.spec_draft_tokens += verified * self._proposed
            stats.spec_accepted += counted_ok
        self._account(t, batch, step_tokens, speculating, drafts_ok)

    def _account(self, t: int, batch: int, tokens: int, speculating: bool, drafts_ok: int) -> None:
        s = self.stats
        s.decode_steps += 1
        s.generated_tokens += tokens
        s.window_tokens += tokens
        if speculating:
            s.window_verify += batch
            s.window_accept_tokens += batch + drafts_ok
            s.window_drafts_ok += drafts_ok
            s.window_drafts_proposed += batch * self._proposed
        if s.decode_steps % self.cfg.decode_log_interval:
            return
        # a decode-log tick: refresh the windowed gauges and the lifetime accept length
        span = (t - s.window_start_ns) / 1e9
        s.last_gen_throughput = s.window_tokens / span if span > 0 else 0.0
        if s.window_verify:
            s.last_accept_length = s.window_accept_tokens / s.window_verify
            s.last_accept_rate = s.window_drafts_ok / max(1, s.window_drafts_proposed)
            s.lifetime_verify += s.window_verify
            s.lifetime_accept_tokens += s.window_accept_tokens
            s.avg_spec_accept_length = s.lifetime_accept_tokens / s.lifetime_verify
        s.window_tokens = s.window_verify = s.window_accept_tokens = 0
        s.window_drafts_ok = s.window_drafts_proposed = 0
        s.window_start_ns = t

    def reset_spec_counters(self) -> None:
        s = self.stats
        s.lifetime_verify = s.lifetime_accept_tokens = 0
        s.avg_spec_accept_length = None
