"""One stage in this process: its share of the users or of the schedule against a target, as a StageResult.

In: a :class:`Target`, a :class:`StageSpec`, a request source and the run's
options. Out: the stage's :class:`StageResult` (or :class:`Interrupted`
carrying the partial one on Ctrl-C / SIGTERM).

Closed loop: each user sends a request, reads it to the end, and sends the
next. Open loop: requests go at planned instants (the stage's ``open_loop``
block says what was planned, sent and how late). Who sends when is the pacing
policy (loadgen/run/pacing.py), the same one Locust's stage uses. Chunk-level
metrics and throughput take every chunk that arrives in [ws, we); request-level
metrics take every request that *started* (open loop: was planned) in [ws, we);
the load is kept up after ``we`` until each of those has finished, so none of
them is cut short and none finishes under a lighter load than it started in.
The window's lifecycle (warm-up until steady, open/close, cool-down, cut,
notes) is loadgen/run/lifecycle.py. A phase-shifting workload's clock
(loadgen/workloads/phases.py) is anchored at the window's opening — with
several processes the one shared instant — so every target's window runs the
same schedule; the analysis finds the phases' bins from the window's start
(loadgen/analysis/compare.py).
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Callable

from loadgen.client.loops import new_event_loop
from loadgen.client.stream import StreamClient
from loadgen.client.target import Target
from loadgen.record import RequestRecord
from loadgen.run.lifecycle import WINDOW, Lifecycle, frozen_heap
from loadgen.run.pacing import Sender, pacing_for
from loadgen.run.progress import report_progress
from loadgen.run.spec import Interrupted, RequestSource, RunOptions, StageSpec, WindowProbe
from loadgen.stage.result import StageResult
from loadgen.workloads.phases import PhaseStream

_now = time.perf_counter_ns


class _Cut(Exception):
    """Inside the loop: the stage was cut short (a KeyboardInterrupt raised in a task is re-raised by
    asyncio from the loop machinery and leaves a 'Task exception was never retrieved' behind)."""

    def __init__(self, partial: StageResult) -> None:
        super().__init__()
        self.partial = partial


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
    window_probe: WindowProbe | None = None,
    opened: Callable[[int], None] | None = None,
    open_at: Callable[[], int | None] | None = None,
    seed_index: int | None = None,
) -> StageResult:
    """One stage in this process; ``user_offset/stride`` pick this process's share of the users (or of the
    open loop's arrivals and in-flight cap).

    ``on_record`` sees every finished record (the client benchmark maps request
    ids to send times with it, to compare TTFT with a server's send log).
    ``window_probe`` is told when the window opens and closes (the server's own
    counters over the window). Several processes share one adaptive window
    through ``opened`` (this process found the load steady at that instant) and
    ``open_at`` (the instant one of them found, or None). The requests come from
    ``opts.seed + seed_index`` (the ladder's step, not the stage's place in the
    order: every target at a step gets the same prompts at the same instants).
    """
    requests = source(opts.seed + (stage_index if seed_index is None else seed_index))
    pacing = pacing_for(spec, requests, opts.seed, user_offset, user_stride, sessions=opts.sessions)
    tag = f"{target.label}-s{stage_index}-p{user_offset}"
    with frozen_heap():
        async with StreamClient(
            target.url, target.make_protocol(), target=target.label, concurrency=pacing.connections,
            timeouts=opts.timeouts, headers=target.headers, tokenizer=opts.tokenizer,
        ) as client:
            await client.warm(pacing.warm_connections)
            if start_at_ns is not None:
                await asyncio.sleep(max(0.0, (start_at_ns - _now()) / 1e9))
            t0 = start_at_ns or _now()
            life = Lifecycle(spec, opts.slo, t0, pacing.n_users, probe=window_probe,
                             on_phase=_anchor_at_window(requests, lambda: life.state.ws))
            sender = Sender(client, life, tag, hooks=(on_record,) if on_record is not None else ())
            tasks = pacing.start(sender, t0)
            tasks.append(asyncio.create_task(life.folder.run()))
            if progress is not None:
                tasks.append(asyncio.create_task(
                    report_progress(progress, client, life.folder, life.state, spec, t0)))
            try:
                await life.drive(tokens=lambda: client.tokens_seen, waiting=pacing.waiting, opened=opened,
                                 open_at=open_at, past_first=lambda: client.tokens_seen - client.events_seen,
                                 positions=client.positions_seen)
            except asyncio.CancelledError:
                life.interrupted()
            finally:
                await life.teardown(tasks + list(pacing.running), client.inflight)
    res = life.result(target, stage_index)
    res.open_loop = pacing.block(spec)
    if life.state.cut is not None and life.state.cut.by == "interrupt":
        raise _Cut(res)
    return res


def _anchor_at_window(requests, ws: Callable[[], int]) -> Callable[[str], None] | None:
    """A phased stream's clock starts when the window opens (the lifecycle says so at ``ws``, the instant every
    process shares); before that, and for any other stream, nothing to do. Requests drawn between ``ws`` and
    this call are phase 0, the schedule's phase there: exact."""
    if not isinstance(requests, PhaseStream):
        return None

    def on_phase(phase: str) -> None:
        if phase == WINDOW:
            requests.anchor(ws())

    return on_phase


def run_stage_sync(target, spec, source, opts, *, stage_index=0, loop_kind="auto", stop_event=None,
                   **kw) -> StageResult:
    """Run one stage on a fresh event loop; Ctrl-C (or SIGTERM) ends it as KeyboardInterrupt.

    The signals are taken by the loop itself: a KeyboardInterrupt raised inside
    a transport callback would be logged and swallowed by uvloop, and the run
    would go on as if nothing had been pressed. ``stop_event`` (a
    multiprocessing event, in worker processes) cuts the stage as a signal does.
    """
    loop = new_event_loop(loop_kind)
    main = loop.create_task(run_stage(target, spec, source, opts, stage_index=stage_index, **kw))
    interrupted = []
    installed = []

    def on_signal() -> None:
        interrupted.append(True)
        main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, on_signal)
            installed.append((sig, previous))
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (e.g. Locust's loop thread): the caller handles signals
    watch = None
    if stop_event is not None:
        async def watch_stop() -> None:
            while not stop_event.is_set():
                await asyncio.sleep(0.1)
            on_signal()
        watch = loop.create_task(watch_stop())
    try:
        result = loop.run_until_complete(main)
    except _Cut as cut:
        raise Interrupted(cut.partial) from None
    except asyncio.CancelledError:
        if interrupted:
            raise Interrupted() from None
        raise
    finally:
        if watch is not None:
            watch.cancel()
            loop.run_until_complete(asyncio.gather(watch, return_exceptions=True))
        for sig, previous in installed:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous)  # the loop's removal does not always restore it (uvloop)
        loop.close()
    if interrupted:  # the stage may have finished in the same instant: the user still asked to stop
        raise Interrupted(result)
    return result
