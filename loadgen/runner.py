"""The stage runner: a target at a fixed concurrency for a while, as a StageResult.

Closed loop: ``C`` users each send a request, read it to the end, and send the
next. Timeline of a stage:

    start ── warm-up ──┬── steady window ──┬── cool-down ──┐
                       ws                  we              end

Chunk-level metrics and throughput take every chunk that arrives in [ws, we).
Request-level metrics take every request that *started* in [ws, we); the load is
kept up after ``we`` until each of those has finished, so none of them is cut
short and none finishes under a lighter load than it started in. Requests
started during cool-down are then cancelled and not counted.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import multiprocessing
import signal
from collections import deque
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from loadgen.client import StreamClient, Timeouts
from loadgen.errors import LoadgenError
from loadgen.loops import new_event_loop
from loadgen.record import RequestRecord
from loadgen.request import GenRequest
from loadgen.selfcheck import CpuMeter, LoopLagMonitor
from loadgen.stage import ClientHealth, Slo, StageAccumulator, StageResult
from loadgen.target import Target
from loadgen.tokencount import Tokenizer

RequestSource = Callable[[int], Iterator[GenRequest]]
"""seed → an endless, deterministic sequence of requests."""

_now = time.perf_counter_ns
CONNECT_BACKOFF_S = 0.2


@dataclass
class StageSpec:
    concurrency: int
    duration_s: float | None = 30.0
    """Length of the steady window; or None with ``requests`` set."""
    requests: int | None = None
    """Close the steady window once this many requests have started inside it."""
    warmup_s: float = 5.0
    ramp_s: float = 0.0
    """Spread the users' first requests evenly over this many seconds.

    Users that all start at once stay in lock-step when their requests take
    equally long: every prefill lands in one step and the throughput comes in
    waves. Spread over about one request's duration, arrivals interleave as in
    real traffic. Keep ``warmup_s`` ≥ ``ramp_s`` + one request duration.
    """
    bin_s: float | None = None
    """Timeline bin width; default: a twentieth of the window (1 s in request-count mode)."""
    max_cooldown_s: float = 600.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise LoadgenError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.duration_s is None and not self.requests:
            raise LoadgenError("a stage needs a duration or a request count")
        if self.duration_s is not None and self.duration_s <= 0:
            raise LoadgenError(f"stage duration must be > 0, got {self.duration_s}")
        if self.warmup_s < 0:
            raise LoadgenError(f"warm-up must be >= 0, got {self.warmup_s}")


@dataclass
class RunOptions:
    slo: Slo = None  # type: ignore[assignment]
    timeouts: Timeouts = Timeouts()
    tokenizer: Tokenizer | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.slo is None:
            self.slo = Slo()


async def run_stage(
    target: Target,
    spec: StageSpec,
    source: RequestSource,
    opts: RunOptions,
    *,
    stage_index: int = 0,
    start_at_ns: int | None = None,
    user_offset: int = 0,
    user_stride: int = 1,
    progress: Callable[[dict], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> StageResult:
    """One stage in this process; ``user_offset/stride`` pick this process's share of the users.

    ``on_record`` sees every finished record (the client benchmark maps request
    ids to send times with it, to compare TTFT with a server's send log).
    """
    users = range(user_offset, spec.concurrency, user_stride)
    n_users = len(users)
    requests = source(opts.seed + stage_index)
    seq = itertools.count()
    tag = f"{target.label}-s{stage_index}-p{user_offset}"
    with _frozen_heap():
        async with StreamClient(
            target.url, target.make_protocol(), target=target.label, concurrency=max(1, n_users),
            timeouts=opts.timeouts, headers=target.headers, tokenizer=opts.tokenizer,
        ) as client:
            await client.warm(n_users)
            if start_at_ns is not None:
                await asyncio.sleep(max(0.0, (start_at_ns - _now()) / 1e9))
            t0 = start_at_ns or _now()
            ws = t0 + int(spec.warmup_s * 1e9)
            far = ws + int(1e18)
            we = ws + int(spec.duration_s * 1e9) if spec.duration_s is not None else far
            bin_s = spec.bin_s or (spec.duration_s / 20 if spec.duration_s is not None else 1.0)
            acc = StageAccumulator(ws, we, int(bin_s * 1e9), opts.slo)
            lag = LoopLagMonitor()
            cpu = CpuMeter()
            lag.start(ws, we)
            state = StageState(ws, we, spec.requests)
            folder = RecordFolder(acc)

            async def user(delay_s: float) -> None:
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                first = True
                while not state.stop_new:
                    req = next(requests)
                    t = _now()
                    if t >= ws and not cpu_started[0]:
                        cpu_started[0] = True
                        cpu.mark_start()
                    inside = state.admit(t)
                    if state.stop_new and not inside:
                        return
                    rec = await client.stream(req, f"{tag}-{next(seq)}", start_ns=t)
                    if first:
                        first = False
                        if rec.end_ns < ws:
                            state.warm_users += 1
                    folder.put(rec)
                    if on_record is not None:
                        on_record(rec)
                    if inside:
                        state.finished_inside()
                    if rec.error_class == "connect":
                        # Nothing listens: retrying at full speed would only burn the client's CPU.
                        await asyncio.sleep(CONNECT_BACKOFF_S)

            cpu_started = [False]
            step = spec.ramp_s / spec.concurrency
            tasks = [asyncio.create_task(user(u * step)) for u in users]
            tasks.append(asyncio.create_task(folder.run()))
            if progress is not None:
                tasks.append(asyncio.create_task(_report_progress(progress, client, acc, state, t0)))
            interrupted = False
            try:
                await state.wait_window_closed()
                acc.close(state.we)
                lag.close_window(state.we)
                if cpu_started[0]:
                    cpu.mark_end()
                try:
                    await asyncio.wait_for(state.wait_inside_done(), spec.max_cooldown_s)
                    incomplete = False
                except asyncio.TimeoutError:
                    incomplete = True
            except asyncio.CancelledError:
                # Ctrl-C: keep what the window measured so far, cut at this instant.
                interrupted = incomplete = True
                acc.close(max(acc.lo, min(acc.hi, _now())))
            finally:
                state.stop_new = True
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await lag.stop()
                folder.drain()
    health = ClientHealth(lag.hist, [cpu.pct] if cpu.pct is not None else [], acc.coalesced_reads)
    res = acc.result(
        target=target.label, url=target.url, protocol=target.protocol, concurrency=spec.concurrency,
        client=health, stage_index=stage_index,
    )
    if incomplete:
        res.incomplete = True
        res.notes.append(f"cool-down exceeded {spec.max_cooldown_s:g} s; unfinished window requests counted as cancelled")
    if res.total.started == 0:
        res.notes.append("no request started inside the steady window")
    if state.warm_users < n_users:
        res.notes.append(f"{n_users - state.warm_users} of {n_users} users had not finished a first request when "
                         "the window opened: the load may not have been steady yet (longer --warmup)")
    if interrupted:
        res.notes.append("interrupted: the window was cut short and its unfinished requests cancelled")
        raise _Cut(res)
    return res


class RecordFolder:
    """Folds finished records into the accumulator one per event-loop iteration.

    The loop that folds is the loop that reads the streams and sends the next
    requests. When many streams end in one decode step, folding all their
    records in one go held it for tens of milliseconds (50 streams of 200
    chunks: 60 ms): every user's next request waited that long, and where the
    kernel gives no receive stamp (loadgen.loops) reads that arrived meanwhile
    were stamped with a stale poll instant. One record per iteration keeps each
    hold to about a third of a millisecond (200 chunks).
    """

    def __init__(self, acc: StageAccumulator) -> None:
        self.acc = acc
        self.pending: deque[RequestRecord] = deque()
        self._wake = asyncio.Event()

    def put(self, rec: RequestRecord) -> None:
        self.pending.append(rec)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                self.acc.add(self.pending.popleft())
                await asyncio.sleep(0)

    def drain(self) -> None:
        while self.pending:
            self.acc.add(self.pending.popleft())


class _Cut(Exception):
    """Inside the loop: the stage was cut short (a KeyboardInterrupt raised in a task is re-raised by
    asyncio from the loop machinery and leaves a 'Task exception was never retrieved' behind)."""

    def __init__(self, partial: StageResult) -> None:
        super().__init__()
        self.partial = partial


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a stage, carrying what that stage measured until then."""

    def __init__(self, partial: StageResult | None = None) -> None:
        super().__init__()
        self.partial = partial


async def _report_progress(progress, client: StreamClient, acc: StageAccumulator, state: StageState,
                           t0: int) -> None:
    """Once a second: phase, elapsed time, requests finished, tokens/s over the last second."""
    last_tokens, last_t = client.tokens_seen, _now()
    while True:
        await asyncio.sleep(1.0)
        t = _now()
        phase = "warm-up" if t < state.ws else "window" if not state.window_closed else "cool-down"
        tps = (client.tokens_seen - last_tokens) / ((t - last_t) / 1e9)
        last_tokens, last_t = client.tokens_seen, t
        progress({"phase": phase, "elapsed_s": (t - t0) / 1e9, "completed": acc.completed,
                  "failed": acc.failed, "tokens_per_s": tps})


@contextmanager
def _frozen_heap():
    """Objects that exist when a stage starts live through it: frozen, the collector's full passes
    (tens of ms in a big process) no longer stall the loop, and with it every chunk stamp."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class StageState:
    """Which requests belong to the window, and when the window and the stage end."""

    def __init__(self, ws: int, we: int, max_requests: int | None) -> None:
        self.ws, self.we = ws, we
        self.max_requests = max_requests
        self.admitted = 0
        self.warm_users = 0
        self.inside_running = 0
        self.stop_new = False
        self._closed = asyncio.Event()
        self._inside_done = asyncio.Event()

    @property
    def window_closed(self) -> bool:
        return self._closed.is_set()

    def admit(self, t: int) -> bool:
        if t >= self.we:
            self._close(self.we)
            return False
        if t < self.ws:
            return False
        if self.max_requests is not None and self.admitted >= self.max_requests:
            self._close(t)
            return False
        self.admitted += 1
        self.inside_running += 1
        return True

    def _close(self, we: int) -> None:
        if not self._closed.is_set():
            self.we = we
            self._closed.set()

    def finished_inside(self) -> None:
        self.inside_running -= 1
        if self._closed.is_set() and self.inside_running == 0:
            self._inside_done.set()

    async def wait_window_closed(self) -> None:
        while not self._closed.is_set():
            remaining = (self.we - _now()) / 1e9
            try:
                await asyncio.wait_for(self._closed.wait(), timeout=max(0.0, min(remaining, 1.0)))
            except asyncio.TimeoutError:
                if _now() >= self.we:
                    self._close(self.we)

    async def wait_inside_done(self) -> None:
        if self.inside_running == 0:
            return
        await self._inside_done.wait()


def run_stage_sync(target, spec, source, opts, *, stage_index=0, loop_kind="auto", **kw) -> StageResult:
    """Run one stage on a fresh event loop; Ctrl-C (or SIGTERM) ends it as KeyboardInterrupt.

    The signals are taken by the loop itself: a KeyboardInterrupt raised inside
    a transport callback would be logged and swallowed by uvloop, and the run
    would go on as if nothing had been pressed.
    """
    loop = new_event_loop(loop_kind)
    main = loop.create_task(run_stage(target, spec, source, opts, stage_index=stage_index, **kw))
    interrupted = []
    installed = []

    def on_signal() -> None:
        interrupted.append(True)
        main.cancel()

    # Worker processes leave signals to their parent: a pool must be able to SIGTERM them.
    if multiprocessing.parent_process() is None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, on_signal)
                installed.append((sig, previous))
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (e.g. Locust's loop thread): the caller handles signals
    try:
        result = loop.run_until_complete(main)
    except _Cut as cut:
        raise Interrupted(cut.partial) from None
    except asyncio.CancelledError:
        if interrupted:
            raise Interrupted() from None
        raise
    finally:
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous)  # the loop's removal does not always restore it (uvloop)
        loop.close()
    if interrupted:  # the stage may have finished in the same instant: the user still asked to stop
        raise Interrupted(result)
    return result


def _worker(args) -> dict:
    target, spec, source, opts, stage_index, start_at, offset, stride, loop_kind = args
    res = run_stage_sync(target, spec, source, opts, stage_index=stage_index, loop_kind=loop_kind,
                         start_at_ns=start_at, user_offset=offset, user_stride=stride)
    return res.to_dict()


def run_stage_processes(target, spec, source, opts, *, processes: int, stage_index=0, loop_kind="auto",
                        progress=None, on_record=None) -> StageResult:
    """The stage's users spread over ``processes`` processes that share one window.

    CLOCK_MONOTONIC is system-wide, so every process opens and closes the window
    at the same instant; their results merge into one.
    """
    if processes <= 1:
        return run_stage_sync(target, spec, source, opts, stage_index=stage_index, loop_kind=loop_kind,
                              progress=progress, on_record=on_record)
    processes = min(processes, spec.concurrency)
    start_at = _now() + int(2e9)  # time for the workers to start and warm their pools
    ctx = multiprocessing.get_context("spawn")
    jobs = [(target, spec, source, opts, stage_index, start_at, i, processes, loop_kind) for i in range(processes)]
    with ctx.Pool(processes) as pool:
        dicts = pool.map(_worker, jobs)
    results = [StageResult.from_dict(d) for d in dicts]
    merged = results[0]
    for r in results[1:]:
        merged.merge(r)
    return merged
