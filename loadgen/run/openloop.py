"""One open-loop stage in this process: requests sent at planned times, as a StageResult.

In: a :class:`Target`, a :class:`StageSpec` whose ``arrivals`` give the planned send offsets
(loadgen.timing), a request source and the run's options. Out: the stage's
:class:`StageResult`, its ``open_loop`` block saying what was planned, what was sent and
how late (or :class:`Interrupted` carrying the partial one).

Open loop: request i is sent at its planned instant whether or not earlier ones have
finished; with an in-flight cap (``spec.concurrency`` > 0) a request that finds the cap
full waits for a slot, and the wait is dispatch lag. Every record carries its planned
instant: it decides the window the request belongs to (a late send does not move it
out), and the latencies from it (TTFT and E2E from plan) are what a user of that
schedule waited. The dispatch lag (handed to the HTTP client − planned) is recorded per
request; a stage whose lag p99 exceeds ``spec.max_lag_ms`` is flagged, never silently
wrong: a client that cannot keep the schedule offers a lighter, smoother load than the
one planned and hides the queueing (vLLM #54101: 1,426 ms of mean dispatch delay).

The window's lifecycle (warm-up, open/close, cool-down, cut) is the closed loop's
(loadgen/run/lifecycle.py): after the window the schedule goes on until every request
planned inside it has ended. Several processes share one schedule: process k of n sends
arrivals k, k+n, k+2n, … with the requests of those positions, so the union is the
schedule one process would have sent.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Callable

from loadgen.client.stream import StreamClient
from loadgen.client.target import Target
from loadgen.record import RequestRecord
from loadgen.run.lifecycle import Lifecycle, frozen_heap
from loadgen.run.progress import report_progress
from loadgen.run.spec import RequestSource, RunOptions, StageSpec, WindowProbe
from loadgen.stage.result import StageResult

_now = time.perf_counter_ns

TIMER_LEAD_NS = 1_000_000
"""The event loop's timers wake up to 1 ms late (epoll's timeout is whole milliseconds, rounded up), so
the dispatcher's timer is set this much early and the last part waited out with a precise sleep; the
loop is held for at most this long per send, only when the next send is that close. Measured with
``loadgen bench dispatch`` (docs/benchmarks.md): on a quiet 16-core host lag p50 0.15 ms and p99 0.3 ms
at constant 50-200 req/s (Poisson: p99 0.6 ms at 50, 1.4-1.7 ms to 500, where sends fall due together);
this 2-core virtual machine adds its own scheduling (a bare 2 ms time.sleep overshoots 0.94 ms at p99)."""
COOLDOWN_BEHIND_NS = 1_000_000_000
"""After the window, a send already this late is skipped (counted in ``skipped_late``): cool-down sends
only keep the load up while the window's requests finish, and a client that far behind has more than
kept it up. Sent anyway, a 4000 req/s stage on a 16-core host sent 94,434 requests for a 3 s window."""


async def _wait_until(t_ns: int, sleep: Callable[[float], None] = time.sleep) -> None:
    ahead = t_ns - _now()
    if ahead > TIMER_LEAD_NS:
        await asyncio.sleep((ahead - TIMER_LEAD_NS) / 1e9)
    elif ahead > 0:
        # the request just handed over starts (its lag stamped, its send begun) before the precise sleep
        # holds the loop: without this, at 100 req/s one send in ten waited behind the next one's sleep
        # (lag p99 1.28 → 0.50 ms on a quiet 16-core host). Not when already late: a yield per late send
        # let a 1000 req/s stage fall a second behind (670 sent/s) where sending the due ones at once kept up
        await asyncio.sleep(0)
    ahead = t_ns - _now()
    if ahead > 0:
        sleep(ahead / 1e9)


class Dispatcher:
    """Sends one process's share of a schedule through ``client`` into ``life``'s window: the open loop of
    ``loadgen run --rate`` and of the Locust ramp (loadgen/locust/openlive.py), one piece.

    ``pairs``: (planned offset s, request) of this share; ``finished(rec)``: what the front does with a
    finished record beyond folding it (the scripted stage's server comparison, Locust's events);
    ``sleep``: the precise sleep for a send's last part (Locust passes the one gevent did not patch).
    """

    def __init__(self, client: StreamClient, life: Lifecycle, pairs, t0: int, cap: int, tag: str, *,
                 finished: Callable[[RequestRecord], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client, self.life, self.pairs, self.t0, self.tag = client, life, pairs, t0, tag
        self.finished, self.sleep = finished, sleep
        self.slots = asyncio.Semaphore(cap) if cap else None
        self.running: set[asyncio.Task] = set()
        self.counts = {"planned": 0, "sent": 0, "held_by_cap": 0, "skipped_late": 0}
        self.due_ns: int | None = None
        """The next planned send while the dispatcher waits for it (the folder keeps clear of it)."""
        life.folder.next_send = lambda: self.due_ns

    async def _one(self, req, rid: str, planned: int, inside: bool) -> None:
        state = self.life.state
        try:
            rec = await self.client.stream(req, rid, start_ns=_now(), planned_ns=planned)
            if not rec.ok:
                state.failures += 1
            self.life.folder.put(rec)
            if self.finished is not None:
                self.finished(rec)
            if inside:
                state.finished_inside()
        finally:
            if self.slots is not None:
                self.slots.release()

    async def run(self) -> None:
        state, counts, slots = self.life.state, self.counts, self.slots
        seq = itertools.count()
        for offset_s, req in self.pairs:
            planned = self.t0 + int(offset_s * 1e9)
            self.due_ns = planned
            await _wait_until(planned, self.sleep)
            self.due_ns = None
            if state.stop_new:
                return
            if state.window_closed and _now() - planned > COOLDOWN_BEHIND_NS:
                counts["planned"] += 1
                counts["skipped_late"] += 1
                continue
            if slots is not None:
                if slots.locked():
                    counts["held_by_cap"] += 1
                await slots.acquire()
            inside = state.admit(planned)  # the planned instant decides the window
            if state.stop_new and not inside:
                if slots is not None:
                    slots.release()
                return
            counts["planned"] += 1  # planned = sent + skipped_late: what came due before the stage ended
            counts["sent"] += 1
            task = asyncio.create_task(self._one(req, f"{self.tag}-{next(seq)}", planned, inside))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    def block(self, spec: StageSpec) -> dict:
        """The stage's ``open_loop`` block: what was planned and how it was sent."""
        return {"rate": spec.arrivals.rate, "arrival": spec.arrivals.name, "max_in_flight": spec.concurrency or None,
                "max_lag_ms": spec.max_lag_ms, **self.counts}


def cap_share(cap: int, offset: int, stride: int) -> int:
    """This process's share of an in-flight cap spread over ``stride`` processes (0: no cap)."""
    if cap <= 0:
        return 0
    return max(1, cap // stride + (1 if offset < cap % stride else 0))


async def run_open_stage(
    target: Target,
    spec: StageSpec,
    source: RequestSource,
    opts: RunOptions,
    *,
    stage_index: int = 0,
    seed_index: int | None = None,
    start_at_ns: int | None = None,
    user_offset: int = 0,
    user_stride: int = 1,
    progress: Callable[[dict], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    window_probe: WindowProbe | None = None,
    opened: Callable[[int], None] | None = None,
    open_at: Callable[[], int | None] | None = None,
) -> StageResult:
    """One open-loop stage in this process (its share of the schedule: see the module doc).

    The arrival times are drawn from ``opts.seed`` (their process keys them by rate too), the
    requests from ``opts.seed + seed_index``: every target at a rate gets the same schedule and
    the same prompts at the same planned instants.
    """
    cap = cap_share(spec.concurrency, user_offset, user_stride)
    seed = opts.seed + (stage_index if seed_index is None else seed_index)
    pairs = itertools.islice(zip(spec.arrivals.times(opts.seed), source(seed)), user_offset, None, user_stride)
    tag = f"{target.label}-s{stage_index}-p{user_offset}"
    with frozen_heap():
        # no connection limit without a cap: aiohttp's pool would queue sends past it unseen
        async with StreamClient(
            target.url, target.make_protocol(), target=target.label, concurrency=cap,
            timeouts=opts.timeouts, headers=target.headers, tokenizer=opts.tokenizer,
        ) as client:
            await client.warm(min(cap or 8, 64))
            if start_at_ns is not None:
                await asyncio.sleep(max(0.0, (start_at_ns - _now()) / 1e9))
            t0 = start_at_ns or _now()
            life = Lifecycle(spec, opts.slo, t0, 0, probe=window_probe)

            def finished(rec: RequestRecord) -> None:
                life.record_end(rec)
                if on_record is not None:
                    on_record(rec)

            sender = Dispatcher(client, life, pairs, t0, cap, tag, finished=finished)
            tasks = [asyncio.create_task(sender.run()), asyncio.create_task(life.folder.run())]
            if progress is not None:
                tasks.append(asyncio.create_task(report_progress(progress, client, life.folder, life.state, spec, t0)))
            try:
                await life.drive(tokens=lambda: client.tokens_seen, waiting=None, opened=opened, open_at=open_at)
            except asyncio.CancelledError:
                life.interrupted()
            finally:
                await life.teardown(tasks + list(sender.running), client.inflight)
    res = life.result(target, stage_index)
    res.open_loop = sender.block(spec)
    return res
