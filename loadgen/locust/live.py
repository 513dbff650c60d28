"""One process's share of a stage, on the asyncio side of the bridge.

In: a :class:`StagePlan` (and this process's share of it). Out: the share's
:class:`StageResult`, and batches of finished records for Locust's statistics.
The window is the one lifecycle of ``loadgen run`` (loadgen/run/lifecycle.py):
``StageState`` decides which requests belong to the steady window [ws, we), a
``StageAccumulator`` folds every finished record on the loop thread (one per
loop iteration, ``RecordFolder``), and after ``we`` the load is kept up until
every request started inside the window has finished; then the stage stops
admitting, cancels what is still in flight (started during cool-down, not
counted) and freezes its result.

What differs from the runner is only who starts the users: each Locust user
greenlet starts :meth:`LiveStage.user_loop` through the bridge and waits for it
for the whole stage; the loop itself is the runner's (request, stream, fold,
repeat) and finished records reach Locust's statistics in batches.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import socket
import time

from loadgen.client.stream import StreamClient
from loadgen.record import RequestRecord
from loadgen.run.lifecycle import Lifecycle
from loadgen.run.stage import CONNECT_BACKOFF_S
from loadgen.stage.result import StageResult

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


class LiveStage:
    def __init__(self, plan: StagePlan, share: int = 0, n_shares: int = 1, tag: str = "", sink=None) -> None:
        self.plan = plan
        self.share, self.n_shares = share, max(1, n_shares)
        self.target = plan.make_target()
        self.tag = tag or f"{plan.label}-s{plan.index}-p{share}"
        self.phase = PREPARING
        self.accepting = True
        """False once the stage stops admitting; users read it from the gevent side to idle."""
        self.result: StageResult | None = None
        self.edges_done: dict | None = None
        """The edge record, frozen when the users stopped (sent with this process's part)."""
        self._ready: asyncio.Event | None = None
        self._life: Lifecycle | None = None
        self._seq = itertools.count()
        self.sink = sink
        """Called on the loop thread with batches of finished records (must be thread-safe)."""
        self._outbox: list[RequestRecord] = []
        self._flush_pending = False
        self.cancelled_inside = 0
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

    # --- the stage (one task for the whole stage) -------------------------------------------
    async def run(self) -> StageResult:
        plan = self.plan
        begun = _now()
        self._ready = asyncio.Event()
        self._requests = plan.requests_iter(self.share, self.n_shares)
        tokenizer = None
        if plan.tokenizer:
            from loadgen.client.tokencount import load_counter

            tokenizer = load_counter(plan.tokenizer)
        local_users = max(1, math.ceil(plan.concurrency / self.n_shares))
        try:
            async with StreamClient(
                self.target.url, self.target.make_protocol(), target=self.target.label,
                concurrency=max(1, plan.concurrency), timeouts=plan.make_timeouts(),
                headers=self.target.headers, tokenizer=tokenizer,
            ) as client:
                self._client = client
                await client.warm(local_users)
                # Every user starts at t0, together, as the runner's do: users that Locust
                # spawned earlier wait for it (a synchronised start is part of the load).
                start_at = plan.start_at_ns if plan.start_at_ns is not None else begun + int(plan.spawn_s * 1e9)
                await asyncio.sleep(max(0.0, (start_at - _now()) / 1e9))
                t0 = max(start_at, _now()) if plan.start_at_ns is None else start_at
                # The plan's warm-up is fixed (max_warmup_s None): the window is known now, before any
                # user starts. Locust's stage ends as it always has (no stage notes here: the conductor
                # notes the merged stage; a cool-down overrun marks it incomplete; requests still
                # streaming when its users are stopped are dropped), so its figures stay as they were.
                self._life = life = Lifecycle(plan.spec(), plan.make_slo(), t0, local_users, notes=False,
                                              overrun="incomplete", fold_streaming=False, on_phase=self._set_phase)
                if plan.scraped:
                    self.edges = EdgeLog(life.state.ws, life.state.we, socket.gethostname())
                folding = asyncio.get_running_loop().create_task(life.folder.run())
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
                    await life.teardown([t for t in self._users if not t.done()] + [folding], client.inflight,
                                        wait_s=5.0)
                    self._flush()
        finally:
            self.accepting = False
            self.phase = DONE
            if self._ready is not None:
                self._ready.set()  # release users still waiting for a stage that never began
        notes = []
        if self.cancelled_inside:
            notes.append(f"{self.cancelled_inside} window request(s) cancelled when Locust stopped their users")
        self.result = res = life.result(self.target, plan.index, notes)
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
        """A closed-loop user, exactly as the runner's: request, stream to the end, fold, repeat.

        Finished records are handed to ``self.sink`` (the gevent side's reporter) in
        batches, so Locust's statistics are updated without a cross-thread round trip
        per request. Returns when the stage admits no more requests.
        """
        if self._ready is None:
            return
        if not self._ready.is_set():
            await self._ready.wait()
        if self._life is None:
            return
        state = self._life.state
        task = asyncio.current_task()
        self._users.add(task)
        try:
            await self._loop(state)
        finally:
            self._users.discard(task)

    async def _loop(self, state) -> None:
        client, folder, requests, seq = self._client, self._life.folder, self._requests, self._seq
        while not state.stop_new:
            req = next(requests)
            t = _now()
            inside = state.admit(t)
            if state.stop_new and not inside:
                return
            try:
                rec = await client.stream(req, f"{self.tag}-{next(seq)}", start_ns=t)
            except asyncio.CancelledError:
                if inside and not state.stop_new:
                    # Locust stopped this user mid-request: the window must not wait for it.
                    self.cancelled_inside += 1
                    state.finished_inside()
                raise
            folder.put(rec)
            if self.edges is not None:
                self.edges.add(rec)
            if inside:
                state.finished_inside()
            self._emit(rec)
            if rec.error_class == "connect":
                await asyncio.sleep(CONNECT_BACKOFF_S)

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
