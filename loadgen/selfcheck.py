"""The client watching itself: event-loop lag and CPU use during a steady window.

A saturated client reads several chunks per wake-up: ITL p50 collapses and p99
balloons while throughput still looks right, so throughput never reveals it
(shared/research/measurement.md §3). Lag is measured every ``interval`` as the
wait of a callback made ready with ``call_soon``: how long work that became
ready now waits behind the loop's backlog. (Timer lateness would mostly measure
uvloop's 1 ms timer granularity.) CPU is process CPU time over wall time.
"""

from __future__ import annotations

import asyncio
import time

from loadgen.histograms import Hist


class LoopLagMonitor:
    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.hist = Hist(1.0, "us")
        self._task: asyncio.Task | None = None
        self._lo = 0
        self._hi = 0

    def start(self, window_start_ns: int, window_end_ns: int) -> None:
        self._lo, self._hi = window_start_ns, window_end_ns
        self._task = asyncio.get_running_loop().create_task(self._run())

    def close_window(self, window_end_ns: int) -> None:
        self._hi = window_end_ns

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        now = time.perf_counter_ns

        def ran(t0: int) -> None:
            t = now()
            if self._lo <= t0 < self._hi:
                self.hist.record((t - t0) // 1000)

        while True:
            await asyncio.sleep(self.interval_s)
            loop.call_soon(ran, now())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # gather, not try/except: a cancellation of the caller itself must go through
            await asyncio.gather(self._task, return_exceptions=True)


class CpuMeter:
    """Process CPU time ÷ wall time between two marks, in percent of one core."""

    def __init__(self) -> None:
        self._cpu0 = self._wall0 = 0.0
        self.pct: float | None = None

    def mark_start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()

    def mark_end(self) -> None:
        wall = time.perf_counter() - self._wall0
        if wall > 0:
            self.pct = 100.0 * (time.process_time() - self._cpu0) / wall
