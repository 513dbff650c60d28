"""One process's share of a stage, on the asyncio side of the bridge: closed loop or open.

In: a :class:`StagePlan` (and this process's share of it). Out: the share's
:class:`StageResult` (an open loop's with its ``open_loop`` block), and batches
of finished records for Locust's statistics.
The window is the one lifecycle of ``loadgen run`` (loadgen/run/lifecycle.py)
and who sends when is the one pacing policy (loadgen/run/pacing.py):

- closed loop: each Locust user greenlet starts :meth:`LiveStage.user_loop`
  through the bridge and waits for it for the whole stage; the loop is the
  runner's ``Closed.user`` (request, stream, fold, repeat).
- open loop (``plan.rate``): no user sends (a Locust user given the stage
  idles); one dispatcher per load process sends on the schedule ``loadgen run
  --rate`` sends (the same arrivals, seeded by the run's seed and the rate, the
  same prompts by seed + ladder step, the same in-flight cap and dispatch-lag
  bound), process k of n sending arrivals k, k+n, k+2n, … so the union is the
  one schedule. Locust's own users are closed loops paced per user
  (``constant_throughput``), bounded by the user count and blind to their own
  lateness: they cannot offer a rate.

Each finished request becomes one Locust request event, in batches. What is
Locust's own: the window on this process's clock for the master's scrapes
(``window``), what the process saw near the window's edges
(loadgen/locust/edges.py), the hold until the master's closing scrape, the
phases for the web UI.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time

from loadgen.client.stream import StreamClient
from loadgen.record import RequestRecord
from loadgen.run.lifecycle import Lifecycle, frozen_heap
from loadgen.run.pacing import Closed, Pacing, Sender, pacing_for
from loadgen.stage.result import StageResult
from loadgen.workloads.phases import PhaseStream

from loadgen.locust.edges import EdgeLog
from loadgen.locust.stageplan import StagePlan

_now = time.perf_counter_ns
REPORT_BATCH_S = 0.1
"""Finished records go to Locust's statistics at most this late, in one batch."""
HOLD_NS = int(1.5e9)
"""A scraped stage keeps its users going after the window until the master says its closing scrape is
done, at most this long after the window's end: a request that ends after the scrape must still be
running when the server is read (a scrape takes 3-9 ms on the simulator, 749 ms on llama.cpp at C=256)."""

# Phases, for progress display (read from the gevent side; plain attribute writes).
PREPARING, WARMUP, WINDOW, COOLDOWN, DONE = "preparing", "warm-up", "window", "cool-down", "done"


def _original_sleep():
    """time.sleep as it was before gevent patched it: on the bridge's thread the patched one would run a
    gevent hub of that thread's own (the bridge's rule: nothing there blocks on gevent)."""
    try:
        import gevent.monkey

        return gevent.monkey.get_original("time", "sleep")
    except ImportError:  # pragma: no cover - Locust brings gevent
        return time.sleep


_sleep = _original_sleep()


class LiveStage:
    def __init__(self, plan: StagePlan, share: int = 0, n_shares: int = 1, tag: str = "", sink=None) -> None:
        self.plan = plan
        self.share, self.n_shares = share, max(1, n_shares)
        self.target = plan.make_target()
        self.tag = tag or f"{plan.label}-s{plan.index}-p{share}"
        self.phase = PREPARING
        self._phases: PhaseStream | None = None
        """A phase-shifting workload's stream, anchored when the window opens (loadgen/workloads/phases.py)."""
        self.accepting = True
        """False once the stage stops admitting; users read it from the gevent side to idle."""
        self.result: StageResult | None = None
        self.edges_done: dict | None = None
        """The edge record, frozen when the users stopped (sent with this process's part)."""
        self._ready: asyncio.Event | None = None
        self._life: Lifecycle | None = None
        self._pacing: Pacing | None = None
        self._sender: Sender | None = None
        self.sink = sink
        """Called on the loop thread with batches of finished records (must be thread-safe)."""
        self._outbox: list[RequestRecord] = []
        self._flush_pending = False
        self._users: set[asyncio.Task] = set()
        self.edges: EdgeLog | None = None
        """What this process saw near the window's edges (only when the master scrapes the stage)."""
        self.scrape_closed = False
        """Set (from any thread) when the master's closing scrape is done: the hold after the window ends."""

    def window(self) -> tuple[int, int] | None:
        """(ws, we) on this process's clock, once the stage's lifecycle has fixed them."""
        life = self._life
        return None if life is None else (life.state.ws, life.state.we)

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        if phase == WINDOW and self._phases is not None:
            # a phase-shifting workload's clock starts with the window, as loadgen run's (run/stage.py)
            self._phases.anchor(self._life.state.ws)

    def _pacing_of(self) -> Pacing:
        plan = self.plan
        stream = plan.stream()
        self._phases = stream if isinstance(stream, PhaseStream) else None
        if plan.open_loop:
            # the schedule from the run's seed (the arrivals key it by rate too), the prompts from seed + step:
            # every target at a rate gets the same requests at the same planned instants
            return pacing_for(plan.spec(), stream, plan.knobs.seed, self.share, self.n_shares, sleep=_sleep,
                              sessions=plan.knobs.sessions())
        users = range(max(1, math.ceil(plan.concurrency / self.n_shares)))
        # a Locust user holds its conversation as the runner's does: the session stays on the user's loop
        pacing = Closed(plan.requests_iter(self.share, self.n_shares, stream), users, plan.concurrency,
                        sessions=plan.knobs.sessions())
        # Locust decides how many of the users this process gets: the pool must not be what limits them
        pacing.connections = max(1, plan.concurrency)
        return pacing

    def _lifecycle(self, t0: int, pacing: Pacing) -> Lifecycle:
        plan = self.plan
        if pacing.open_loop:
            # loadgen run --rate's lifecycle settings (its notes; a cool-down past its bound is a cut that keeps
            # the window, which the saturation reading takes as such): an open loop reads the same from either front
            return Lifecycle(plan.spec(), plan.make_slo(), t0, 0, on_phase=self._set_phase)
        # The plan's warm-up is fixed (max_warmup_s None): the window is known now, before any user starts.
        # Locust's closed stage ends as it always has (no stage notes here: the conductor notes the merged
        # stage; a cool-down overrun marks it incomplete; requests still streaming when its users are stopped
        # are dropped), so its figures stay as they were.
        return Lifecycle(plan.spec(), plan.make_slo(), t0, pacing.n_users, notes=False, overrun="incomplete",
                         fold_streaming=False, on_phase=self._set_phase)

    # --- the stage (one task for the whole stage) -------------------------------------------
    async def run(self) -> StageResult:
        plan = self.plan
        begun = _now()
        self._ready = asyncio.Event()
        self._pacing = pacing = self._pacing_of()
        tokenizer = None
        if plan.knobs.tokenizer:
            from loadgen.client.tokencount import load_counter

            tokenizer = load_counter(plan.knobs.tokenizer)
        try:
            with frozen_heap():
                async with StreamClient(
                    self.target.url, self.target.make_protocol(), target=self.target.label,
                    concurrency=pacing.connections, timeouts=plan.knobs.timeouts(),
                    headers=self.target.headers, tokenizer=tokenizer,
                ) as client:
                    await client.warm(pacing.warm_connections)
                    # Every user starts at t0, together, as the runner's do: users that Locust
                    # spawned earlier wait for it (a synchronised start is part of the load).
                    start_at = plan.start_at_ns if plan.start_at_ns is not None else begun + int(plan.spawn_s * 1e9)
                    await asyncio.sleep(max(0.0, (start_at - _now()) / 1e9))
                    t0 = max(start_at, _now()) if plan.start_at_ns is None else start_at
                    self._life = life = self._lifecycle(t0, pacing)
                    if plan.scraped:
                        self.edges = EdgeLog(life.state.ws, life.state.we, socket.gethostname())
                    self._sender = Sender(client, life, self.tag, hooks=(self._edge, self._emit))
                    helpers = [asyncio.create_task(life.folder.run())]
                    if pacing.open_loop:
                        helpers += pacing.start(self._sender, t0)
                    self.phase = WARMUP
                    self._ready.set()
                    try:
                        await life.drive()
                        if self.edges is not None and life.state.cut is None:
                            await self._hold(life.state.we + HOLD_NS)
                    finally:
                        if self.edges is not None:
                            self._close_edges(client.inflight)
                        # Users still streaming (requests started in cool-down) are cancelled, not counted.
                        life.state.stop_new = True
                        self.accepting = False
                        users = [t for t in self._users if not t.done()]
                        await life.teardown(users + helpers + list(pacing.running), client.inflight, wait_s=5.0)
                        self._flush()
        finally:
            self.accepting = False
            self.phase = DONE
            if self._ready is not None:
                self._ready.set()  # release users still waiting for a stage that never began
        notes = []
        if self._sender is not None and self._sender.cancelled_inside:
            notes.append(f"{self._sender.cancelled_inside} window request(s) cancelled when Locust stopped "
                         "their users")
        self.result = res = life.result(self.target, plan.index, notes)
        res.open_loop = pacing.block(life.spec)
        return res

    async def _hold(self, until_ns: int) -> None:
        # the load stays up (cool-down requests, not counted) until the server has been read
        while not self.scrape_closed and _now() < until_ns:
            await asyncio.sleep(0.005)

    def _close_edges(self, inflight: dict) -> None:
        """Stop recording: what is still streaming counts for the tokens it received so far, once."""
        edges = self.edges
        edges.until = _now()
        for rec in list(inflight.values()):
            edges.add(rec, ended=False)
        self.edges_done = edges.to_dict()
        self.edges = None  # records that end from here on are not added

    # --- one user (one task per Locust user, for as long as the stage admits requests) -----------
    async def user_loop(self) -> None:
        """A closed-loop user, exactly as the runner's (``Closed.user``): request, stream to the end, fold,
        repeat; finished records reach Locust's statistics in batches, without a cross-thread round trip per
        request. Returns when the stage admits no more requests; at once in an open loop (the dispatcher
        sends)."""
        if self._ready is None:
            return
        if not self._ready.is_set():
            await self._ready.wait()
        if self._life is None or self._pacing.open_loop:
            return
        task = asyncio.current_task()
        self._users.add(task)
        try:
            await self._pacing.user(self._sender)
        finally:
            self._users.discard(task)

    def _edge(self, rec: RequestRecord) -> None:
        if self.edges is not None:
            self.edges.add(rec)

    def _emit(self, rec: RequestRecord) -> None:
        if self.sink is None:
            return
        self._outbox.append(rec)
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_later(REPORT_BATCH_S, self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        if self._outbox:
            batch, self._outbox = self._outbox, []
            self.sink(batch)
