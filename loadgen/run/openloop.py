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
the dispatcher's timer is set this much early and the last part waited out with a precise sleep (about
0.06 ms late): on this 2-core machine lag p99 went from 1.1 ms to ~0.1 ms at 50 req/s. The loop is held
for at most this long per send, only when the next send is that close."""
CONNECT_BACKOFF_S = 0.2


async def _wait_until(t_ns: int) -> None:
    ahead = t_ns - _now()
    if ahead > TIMER_LEAD_NS:
        await asyncio.sleep((ahead - TIMER_LEAD_NS) / 1e9)
        ahead = t_ns - _now()
    if ahead > 0:
        time.sleep(ahead / 1e9)


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
    counts = {"planned": 0, "sent": 0, "held": 0, "schedule_ended": False}
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
            state, folder = life.state, life.folder
            slots = asyncio.Semaphore(cap) if cap else None
            running: set[asyncio.Task] = set()

            async def one(req, rid: str, planned: int, inside: bool) -> None:
                try:
                    rec = await client.stream(req, rid, start_ns=_now(), planned_ns=planned)
                    life.record_end(rec)
                    if not rec.ok:
                        state.failures += 1
                    folder.put(rec)
                    if on_record is not None:
                        on_record(rec)
                    if inside:
                        state.finished_inside()
                finally:
                    if slots is not None:
                        slots.release()

            async def dispatch() -> None:
                seq = itertools.count()
                for offset_s, req in pairs:
                    planned = t0 + int(offset_s * 1e9)
                    await _wait_until(planned)
                    if state.stop_new:
                        return
                    counts["planned"] += 1
                    if slots is not None:
                        if slots.locked():
                            counts["held"] += 1
                        await slots.acquire()
                    inside = state.admit(planned)
                    if state.stop_new and not inside:
                        if slots is not None:
                            slots.release()
                        return
                    counts["sent"] += 1
                    task = asyncio.create_task(one(req, f"{tag}-{next(seq)}", planned, inside))
                    running.add(task)
                    task.add_done_callback(running.discard)
                counts["schedule_ended"] = True  # a trace's last arrival: the window closes when it is due

            tasks = [asyncio.create_task(dispatch()), asyncio.create_task(folder.run())]
            if progress is not None:
                tasks.append(asyncio.create_task(report_progress(progress, client, folder, state, spec, t0)))
            try:
                await life.drive(tokens=lambda: client.tokens_seen, ready=None, opened=opened, open_at=open_at)
            except asyncio.CancelledError:
                life.interrupted()
            finally:
                await life.teardown(tasks + list(running), client.inflight)
    res = life.result(target, stage_index)
    res.open_loop = {"rate": spec.arrivals.rate, "arrival": spec.arrivals.name, "max_in_flight": spec.concurrency or None,
                     "max_lag_ms": spec.max_lag_ms, "planned": counts["planned"], "sent": counts["sent"],
                     "held_by_cap": counts["held"]}
    return res
