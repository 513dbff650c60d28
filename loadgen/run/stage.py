"""One stage in this process: ``C`` closed-loop users against a target, as a StageResult.

In: a :class:`Target`, a :class:`StageSpec`, a request source and the run's
options. Out: the stage's :class:`StageResult` (or :class:`Interrupted`
carrying the partial one on Ctrl-C / SIGTERM).

Closed loop: each user sends a request, reads it to the end, and sends the
next. Chunk-level metrics and throughput take every chunk that arrives in
[ws, we); request-level metrics take every request that *started* in [ws, we);
the load is kept up after ``we`` until each of those has finished, so none of
them is cut short and none finishes under a lighter load than it started in.
The window's lifecycle (warm-up until steady, open/close, cool-down, cut,
notes) is loadgen/run/lifecycle.py; this module runs the users.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from typing import Callable

from loadgen.client.loops import new_event_loop
from loadgen.client.stream import StreamClient
from loadgen.client.target import Target
from loadgen.record import RequestRecord
from loadgen.run.lifecycle import Lifecycle, frozen_heap
from loadgen.run.progress import report_progress
from loadgen.run.spec import Interrupted, RequestSource, RunOptions, StageSpec, WindowProbe
from loadgen.stage.result import StageResult

_now = time.perf_counter_ns
CONNECT_BACKOFF_S = 0.2
"""A user whose request found nothing listening waits this long before the next (not a busy loop)."""


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
    """One stage in this process; ``user_offset/stride`` pick this process's share of the users.

    ``on_record`` sees every finished record (the client benchmark maps request
    ids to send times with it, to compare TTFT with a server's send log).
    ``window_probe`` is told when the window opens and closes (the server's own
    counters over the window). Several processes share one adaptive window
    through ``opened`` (this process found the load steady at that instant) and
    ``open_at`` (the instant one of them found, or None).
    """
    if spec.open_loop:
        from loadgen.run.openloop import run_open_stage

        res = await run_open_stage(target, spec, source, opts, stage_index=stage_index, seed_index=seed_index,
                                   start_at_ns=start_at_ns, user_offset=user_offset, user_stride=user_stride,
                                   progress=progress, on_record=on_record, window_probe=window_probe,
                                   opened=opened, open_at=open_at)
        if res.cut is not None and res.cut["by"] == "interrupt":
            raise _Cut(res)
        return res
    users = range(user_offset, spec.concurrency, user_stride)
    n_users = len(users)
    # the ladder's step, not the stage's place in the order: every target at a step gets the same prompts
    requests = source(opts.seed + (stage_index if seed_index is None else seed_index))
    seq = itertools.count()
    tag = f"{target.label}-s{stage_index}-p{user_offset}"
    with frozen_heap():
        async with StreamClient(
            target.url, target.make_protocol(), target=target.label, concurrency=max(1, n_users),
            timeouts=opts.timeouts, headers=target.headers, tokenizer=opts.tokenizer,
        ) as client:
            await client.warm(n_users)
            if start_at_ns is not None:
                await asyncio.sleep(max(0.0, (start_at_ns - _now()) / 1e9))
            t0 = start_at_ns or _now()
            life = Lifecycle(spec, opts.slo, t0, n_users, probe=window_probe)
            state, folder = life.state, life.folder
            started_users = [0]
            lock_step = spec.concurrency > 1 and spec.ramp_s == 0
            first_rids: set[str] = set()
            """Users' first requests still running."""

            def waiting() -> int:
                """Users not yet streaming: not started, or their first request neither ended nor streaming
                tokens. Until none is, the server is still taking the first prompts in (measured on an H200 at
                C=256 with temperature 0.8: 167 tokens in a 10 s window whose rate had "settled" at zero)."""
                if lock_step:
                    # users started together with nothing to spread them by: until each has finished a
                    # first request the batch is one lock-step wave, whose flat rate is not the mix to come
                    return n_users - state.first_done
                return n_users - started_users[0] + sum(
                    1 for rid in first_rids if (r := client.inflight.get(rid)) is None or not r.chunk_ns)

            async def user(delay_s: float) -> None:
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                started_users[0] += 1
                first = True
                while not state.stop_new:
                    req = next(requests)
                    t = _now()
                    inside = state.admit(t)
                    if state.stop_new and not inside:
                        return
                    rid = f"{tag}-{next(seq)}"
                    if first:
                        first_rids.add(rid)
                    rec = await client.stream(req, rid, start_ns=t)
                    life.record_end(rec)
                    if not rec.ok:
                        state.failures += 1
                    if first:
                        first = False
                        first_rids.discard(rid)
                        state.first_done += 1
                    folder.put(rec)
                    if on_record is not None:
                        on_record(rec)
                    if inside:
                        state.finished_inside()
                    if rec.error_class == "connect":
                        # Nothing listens: retrying at full speed would only burn the client's CPU.
                        await asyncio.sleep(CONNECT_BACKOFF_S)

            step = spec.ramp_s / spec.concurrency
            tasks = [asyncio.create_task(user(u * step)) for u in users]
            tasks.append(asyncio.create_task(folder.run()))
            if progress is not None:
                tasks.append(asyncio.create_task(report_progress(progress, client, folder, state, spec, t0)))
            try:
                await life.drive(tokens=lambda: client.tokens_seen, waiting=waiting, opened=opened,
                                 open_at=open_at)
            except asyncio.CancelledError:
                life.interrupted()
            finally:
                await life.teardown(tasks, client.inflight)
    res = life.result(target, stage_index)
    if state.cut is not None and state.cut.by == "interrupt":
        raise _Cut(res)
    return res


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
