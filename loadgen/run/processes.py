"""One stage over N client processes that share one window.

In: what :func:`loadgen.run.stage.run_stage` takes, and a process count. Out:
one merged :class:`StageResult` (HDR histograms, counters and timelines add),
or :class:`Interrupted` with the merged partial stage. Each worker process runs
its share of the users (every n-th) through the same stage code; an adaptive
warm-up's instant is shared through one ``multiprocessing.Value``.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import time

from loadgen.errors import LoadgenError
from loadgen.run.progress import sum_progress
from loadgen.run.spec import Interrupted
from loadgen.run.stage import run_stage_sync
from loadgen.stage.result import StageResult

_now = time.perf_counter_ns


def _worker(args) -> None:
    """One process's share of a stage: its result (or the partial one, when cut) goes to ``results``."""
    (target, spec, source, opts, stage_index, start_at, offset, stride, loop_kind,
     results, progress_q, stop_event, open_ns, window_probe, seed_index) = args
    # Ctrl-C in a terminal reaches the whole process group. Until the stage's loop takes the signals
    # (and cuts this share as the parent's stop_event would), it must not kill the worker mid-start.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def opened(t: int) -> None:
        with open_ns.get_lock():
            if open_ns.value == 0 or t < open_ns.value:
                open_ns.value = t

    def progress(p: dict) -> None:
        progress_q.put((offset, p))

    try:
        res = run_stage_sync(target, spec, source, opts, stage_index=stage_index, loop_kind=loop_kind,
                             start_at_ns=start_at, user_offset=offset, user_stride=stride,
                             stop_event=stop_event, progress=progress, opened=opened, window_probe=window_probe,
                             open_at=lambda: open_ns.value or None, seed_index=seed_index)
        results.put((offset, "done", res.to_dict()))
    except Interrupted as exc:
        results.put((offset, "cut", exc.partial.to_dict() if exc.partial is not None else None))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it in one line
        results.put((offset, "error", f"{type(exc).__name__}: {exc}"))


def run_stage_processes(target, spec, source, opts, *, processes: int, stage_index=0, loop_kind="auto",
                        progress=None, on_record=None, window_probe=None, seed_index=None,
                        stop=None) -> StageResult:
    """The stage's users spread over ``processes`` processes that share one window.

    CLOCK_MONOTONIC is system-wide, so every process opens and closes the window
    at the same instant (an adaptive warm-up's instant is shared through
    ``open_ns``); their results merge into one. Progress lines are the sum of
    the processes' own; Ctrl-C or SIGTERM in this process cuts every worker's
    share where it is and the merged partial stage is kept, as with one process.
    ``stop``: an event (``is_set()``) that cuts the stage as Ctrl-C does (the ramp's watch on a server
    that exited).
    """
    if processes <= 1:
        return run_stage_sync(target, spec, source, opts, stage_index=stage_index, loop_kind=loop_kind,
                              progress=progress, on_record=on_record, window_probe=window_probe,
                              seed_index=seed_index, stop_event=stop)
    if not spec.open_loop:
        processes = min(processes, spec.concurrency)  # an open loop's schedule is shared arrival by arrival
    start_at = _now() + int(2e9)  # time for the workers to start and warm their pools
    ctx = multiprocessing.get_context("spawn")
    results, progress_q, stop_event = ctx.Queue(), ctx.Queue(), ctx.Event()
    open_ns = ctx.Value("q", 0)
    workers = [ctx.Process(target=_worker, daemon=True, args=(
        (target, spec, source, opts, stage_index, start_at, i, processes, loop_kind, results, progress_q,
         stop_event, open_ns, window_probe if i == 0 else None, seed_index),)) for i in range(processes)]
    for w in workers:
        w.start()
    got: dict[int, tuple[str, object]] = {}
    interrupted = False
    try:
        _collect(workers, results, progress_q, got, progress, stop, stop_event)
    except KeyboardInterrupt:
        interrupted = True
        stop_event.set()
        _collect_cut(workers, results, got, deadline=time.monotonic() + 30.0)
    finally:
        stop_event.set()
        for w in workers:
            w.join(5.0)
            if w.is_alive():
                w.kill()
                w.join(5.0)
    return _merged(got, processes, interrupted)


def _collect(workers, results, progress_q, got: dict, progress, stop, stop_event) -> None:
    """Every worker's result into ``got``, the summed progress shown meanwhile; ``stop`` cuts every share."""
    latest: dict[int, dict] = {}
    while len(got) < len(workers):
        if stop is not None and stop.is_set():
            stop_event.set()  # every worker cuts its share; their results are still collected
        try:
            while True:
                i, p = progress_q.get_nowait()
                latest[i] = p
        except queue.Empty:
            pass
        if latest and progress is not None and len(latest) == len(workers):
            progress(sum_progress(list(latest.values())))
            latest.clear()
        try:
            i, kind, payload = results.get(timeout=0.2)
            got[i] = (kind, payload)
        except queue.Empty:
            if not any(w.is_alive() for w in workers) and results.empty():
                return


def _collect_cut(workers, results, got: dict, deadline: float) -> None:
    """After Ctrl-C: the workers' partial results, as long as they come before ``deadline``."""
    while len(got) < len(workers) and time.monotonic() < deadline:
        try:
            i, kind, payload = results.get(timeout=0.5)
            got[i] = (kind, payload)
        except queue.Empty:
            if not any(w.is_alive() for w in workers):
                return


def _merged(got: dict, processes: int, interrupted: bool) -> StageResult:
    """The workers' results as one stage (or Interrupted carrying it; a worker's error in one line)."""
    errors = [p for k, p in got.values() if k == "error"]
    dicts = [p for k, p in got.values() if k in ("done", "cut") and p is not None]
    cut = interrupted or any(k == "cut" for k, _ in got.values())
    if errors and not cut:
        raise LoadgenError(f"a stage worker process failed: {errors[0]}")
    merged = None
    if dicts:
        parts = [StageResult.from_dict(d) for d in dicts]
        merged = parts[0]
        for r in parts[1:]:
            merged.merge(r)
        if len(dicts) < processes:
            merged.incomplete = True
            merged.notes.append(f"{processes - len(dicts)} of {processes} client processes returned nothing: "
                                "their users' requests are missing")
    if cut:
        raise Interrupted(merged)
    if merged is None:
        raise LoadgenError("no stage worker process returned a result")
    return merged
