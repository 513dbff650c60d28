"""One process's share of a stage, on the asyncio side of the bridge.

The same window semantics as ``loadgen run`` (loadgen/runner.py), by the same
code where possible: ``_StageState`` decides which requests belong to the steady
window [ws, we), a ``StageAccumulator`` folds every finished record on the loop
thread, and after ``we`` the load is kept up until every request started inside
the window has finished; then the stage stops admitting, cancels what is still
in flight (started during cool-down, not counted) and freezes its result.

What differs from the runner is only who drives the users: here each Locust
user greenlet calls :meth:`LiveStage.one` through the bridge, once per request,
instead of an asyncio task looping.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time

from loadgen.client import StreamClient
from loadgen.record import RequestRecord
from loadgen.runner import CONNECT_BACKOFF_S, _StageState
from loadgen.selfcheck import CpuMeter, LoopLagMonitor
from loadgen.stage import ClientHealth, StageAccumulator, StageResult

from .plan import StagePlan

_now = time.perf_counter_ns

# Phases, for progress display (read from the gevent side; plain attribute writes).
PREPARING, WARMUP, WINDOW, COOLDOWN, DONE = "preparing", "warm-up", "window", "cool-down", "done"


class LiveStage:
    def __init__(self, plan: StagePlan, share: int = 0, n_shares: int = 1, tag: str = "") -> None:
        self.plan = plan
        self.share, self.n_shares = share, max(1, n_shares)
        self.target = plan.make_target()
        self.tag = tag or f"{plan.label}-s{plan.index}-p{share}"
        self.phase = PREPARING
        self.accepting = True
        """False once the stage stops admitting; users read it from the gevent side to idle."""
        self.result: StageResult | None = None
        self._ready: asyncio.Event | None = None
        self._state: _StageState | None = None
        self._inflight: set[asyncio.Task] = set()
        self._seq = itertools.count()

    # --- the stage (one task for the whole stage) -------------------------------------------
    async def run(self) -> StageResult:
        plan = self.plan
        self._ready = asyncio.Event()
        self._requests = plan.requests_iter(self.share, self.n_shares)
        tokenizer = None
        if plan.tokenizer:
            from loadgen.tokencount import load_tokenizer

            tokenizer = load_tokenizer(plan.tokenizer)
        local_users = max(1, math.ceil(plan.concurrency / self.n_shares))
        incomplete = False
        try:
            async with StreamClient(
                self.target.url, self.target.make_protocol(), target=self.target.label,
                concurrency=max(1, plan.concurrency), timeouts=plan.make_timeouts(),
                headers=self.target.headers, tokenizer=tokenizer,
            ) as client:
                self._client = client
                await client.warm(local_users)
                if plan.start_at_ns is not None:
                    await asyncio.sleep(max(0.0, (plan.start_at_ns - _now()) / 1e9))
                t0 = plan.start_at_ns or _now()
                ws = t0 + int(plan.warmup_s * 1e9)
                far = ws + int(1e18)
                we = ws + int(plan.duration_s * 1e9) if plan.duration_s is not None else far
                bin_s = plan.bin_s or (plan.duration_s / 20 if plan.duration_s is not None else 1.0)
                self._acc = StageAccumulator(ws, we, int(bin_s * 1e9), plan.make_slo())
                self._lag = LoopLagMonitor()
                self._cpu = CpuMeter()
                self._cpu_started = False
                self._lag.start(ws, we)
                self._state = state = _StageState(ws, we, plan.requests)
                self.phase = WARMUP
                self._ready.set()
                try:
                    await state.wait_window_closed()
                    self.phase = COOLDOWN
                    self._acc.close(state.we)
                    self._lag.close_window(state.we)
                    if self._cpu_started:
                        self._cpu.mark_end()
                    try:
                        await asyncio.wait_for(state.wait_inside_done(), plan.max_cooldown_s)
                    except asyncio.TimeoutError:
                        incomplete = True
                finally:
                    state.stop_new = True
                    self.accepting = False
                    for t in list(self._inflight):
                        t.cancel()
                    if self._inflight:
                        await asyncio.gather(*self._inflight, return_exceptions=True)
                    await self._lag.stop()
        finally:
            self.accepting = False
            self.phase = DONE
            if self._ready is not None:
                self._ready.set()  # release users still waiting for a stage that never began
        health = ClientHealth(self._lag.hist, [self._cpu.pct] if self._cpu.pct is not None else [],
                              self._acc.coalesced_reads)
        res = self._acc.result(
            target=self.target.label, url=self.target.url, protocol=self.target.protocol,
            concurrency=plan.concurrency, client=health, stage_index=plan.index,
        )
        if incomplete:
            res.incomplete = True
            res.notes.append(f"cool-down exceeded {plan.max_cooldown_s:g} s; "
                             "unfinished window requests counted as cancelled")
        self.result = res
        return res

    # --- one request (one task per user request) ------------------------------------------------
    async def one(self) -> RequestRecord | None:
        """A user's next request, streamed and folded; None when the stage admits no more."""
        if self._ready is None:
            return None
        if not self._ready.is_set():
            await self._ready.wait()
        state = self._state
        if state is None or state.stop_new:
            return None
        req = next(self._requests)
        t = _now()
        if t >= state.ws and not self._cpu_started:
            self._cpu_started = True
            self._cpu.mark_start()
        if t >= state.ws and self.phase == WARMUP:
            self.phase = WINDOW
        inside = state.admit(t)
        if state.stop_new and not inside:
            return None
        task = asyncio.current_task()
        self._inflight.add(task)
        try:
            rec = await self._client.stream(req, f"{self.tag}-{next(self._seq)}", start_ns=t)
        finally:
            self._inflight.discard(task)
        self._acc.add(rec)
        if inside:
            state.finished_inside()
        if rec.error_class == "connect":
            await asyncio.sleep(CONNECT_BACKOFF_S)
        return rec
