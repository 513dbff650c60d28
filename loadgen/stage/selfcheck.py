"""The client watching itself: event-loop lag and CPU use during a steady window.

A saturated client reads several chunks per wake-up: ITL p50 collapses and p99
balloons while throughput still looks right, so throughput never reveals it
(docs/metrics.md, §What can distort them). CPU is process CPU time over wall time.

Lag is sampled every ``interval`` as the time bytes that reached a socket at
that instant would wait before the loop could read them: the part of the
monitor's own timer lateness beyond the timers' 1 ms granularity (a stall of
the loop: one long callback, a GC pause, the process waiting for its core)
plus the wait of a callback made ready with ``call_soon`` behind the loop's
backlog. The ``call_soon`` wait alone misses stalls that fall while the
monitor sleeps, which is most of them: with the loop blocked 30 ms per
finished request (C=8, steps of 40 ms) it read p99 0.03 ms where this
reads 37.5 ms; blocked 150 ms, 4.4 ms against 609 ms.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from loadgen.histograms import Hist

TIMER_GRANULARITY_NS = 1_000_000
"""epoll and libuv time out in whole milliseconds: a sleeping loop's timer fires up to 1 ms late."""


class LoopLagMonitor:
    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.hist = Hist(1.0, "us")
        self._task: asyncio.Task | None = None
        self._lo = 0
        self._hi = 0
        self.peak_ns = 0
        """The longest stall from a second before the window on, past its end too: the scrapes that bound a
        server's counters are read 0.2 s before the window opens and just after it closes (the stage's start,
        every user connecting, is left out)."""
        self.kernel_stamps = False
        """Set by ``start``: the loop is loadgen's stamping loop, whose plain-TCP reads carry the
        kernel's receive time (for ClientHealth.kernel_stamps; TLS reads have none)."""

    def start(self, window_start_ns: int, window_end_ns: int) -> None:
        from loadgen.client import loops

        self._lo, self._hi = window_start_ns, window_end_ns
        loop = asyncio.get_running_loop()
        self.kernel_stamps = isinstance(loop, loops._StampingLoop) and loops._SO_TIMESTAMPNS is not None
        self._task = loop.create_task(self._run())

    def close_window(self, window_end_ns: int) -> None:
        self._hi = window_end_ns

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        now = time.perf_counter_ns
        interval_ns = int(self.interval_s * 1e9)

        def ran(due: int, stall: int, t0: int) -> None:
            late = stall + now() - t0
            if due >= self._lo - 1_000_000_000:
                self.peak_ns = max(self.peak_ns, late)
            if self._lo <= due < self._hi:
                self.hist.record(late // 1000)

        while True:
            due = now() + interval_ns
            await asyncio.sleep(self.interval_s)
            t = now()
            loop.call_soon(ran, due, max(0, t - due - TIMER_GRANULARITY_NS), t)

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


def step_gap_us(chunk_gap: Hist) -> float | None:
    """The gap between a stream's decode steps (or bursts), from a stage's chunk-gap histogram: µs.

    The duration-weighted median of the chunk gaps: the gap that the median
    instant of streaming time falls in. Gaps inside a burst (llama.cpp writes a
    step's accepted drafts as separate events microseconds apart) and chunks
    that shared one read (gap 0) hold almost no streaming time, so they do not
    pull it down the way they pull down the plain median: on the CPU
    llama-server with n-gram speculation at C=1 the chunk-gap p50 was 0.001 ms
    and this estimate is the verify step (tens of ms). On a server that sends
    one event per step (SGLang-like lock-step, staggered streams) it is the
    step gap itself. None when the stage has no chunk gap.
    """
    if not chunk_gap.count:
        return None
    counts, lows, widths = _buckets(chunk_gap)
    mids = lows + widths / 2
    cum = np.cumsum(mids * counts)
    k = int(np.searchsorted(cum, cum[-1] / 2))
    return float(mids[min(k, len(mids) - 1)]) / chunk_gap.scale


def _buckets(h: Hist) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, lowest value, width) of every non-empty bucket: hdrh's index arithmetic on arrays
    (its per-bucket getters cost ~1 µs each, 10 ms on a stage's 10 k buckets)."""
    hh = h.h
    all_counts = np.ctypeslib.as_array(hh.counts)
    idx = np.flatnonzero(all_counts)
    half_mag, half = hh.sub_bucket_half_count_magnitude, hh.sub_bucket_half_count
    bucket = (idx >> half_mag) - 1
    sub = (idx & (half - 1)) + half
    low = bucket < 0
    sub[low] -= half
    bucket[low] = 0
    shift = bucket + hh.unit_magnitude
    return (all_counts[idx].astype(np.float64), (sub << shift).astype(np.float64),
            (np.int64(1) << shift).astype(np.float64))


DEAF_SHARE_KERNEL = 0.02
"""With kernel receive stamps a stall shifts no stamp: a read goes wrong only when it merges two sends
to one stream, i.e. when a send finds the loop deaf for longer than the step gap (it is then read
together with the next). A lag sample taken at a random instant is that deafness, so the share of
samples longer than the step gap estimates the share of sends so merged; flagged above 2 %. Measured
against the simulator's log (zero gaps = merged reads, step-shaped streams; ITL p99 error):
1.1-1.2 % at time-scale 10 on this busy machine (1.6-2.1 % merged, ITL p99 +0.2-3.7 %) and 0.2 % with
the loop blocked 30 ms per finished request (0.35 %, +0.3 %) are not flagged; 2.7 % blocked 60 ms
(12 % merged, ITL p99 +62 %), 4.7 % for 50 lock-step streams on 5.5 ms steps (9 %, +11 %) are."""
LAG_SHARE_POLL = 0.1
"""Without kernel stamps (TLS, uvloop) a chunk is stamped when the loop gets to it: the lag is the error."""
CPU_BUSY_PCT = 90.0
COALESCED_SHARE = 0.01
"""Reads that found several sends (``coalesced_reads``), as a share of chunks: evidence once the loop
lagged a tenth of a step, the least lag at which a merged read moves a figure noticeably."""


def share_above(h: Hist, value: float) -> float:
    """Share of a histogram's samples above ``value`` (in its unit)."""
    total = h.count
    if not total:
        return 0.0
    counts, lows, _ = _buckets(h)
    return float(counts[lows > value * h.scale].sum()) / total


@dataclass(frozen=True)
class SelfCheck:
    """The self-check's verdict on one stage, with the figures it was judged from."""

    client_bound: bool
    reasons: list[str]
    advice: str
    """What would help, "" when not client-bound."""
    lag_p99_ms: float | None
    step_gap_ms: float | None
    deaf_share: float | None
    """Share of lag samples longer than the step gap: the sends that may have been read with the next."""
    cpu_max_pct: float | None
    coalesced_share: float | None


def assess(lag: Hist, cpu_pct: list[float], coalesced_reads: int, chunk_gap: Hist | None, chunks: int,
           *, kernel_stamps: bool = True, processes: int = 1) -> SelfCheck:
    """Did the client distort the stage's figures? Judged from what the client did.

    ``chunk_gap``: the stage's chunk-gap histogram (all workloads); ``chunks``: chunks in the window.
    """
    reasons: list[str] = []
    p99 = lag.percentile(99) / 1000 if lag.count else None
    gap_us = step_gap_us(chunk_gap) if chunk_gap is not None else None
    step = gap_us / 1000 if gap_us else None
    cpu = max(cpu_pct) if cpu_pct else None
    share = coalesced_reads / chunks if chunks else None
    deaf = share_above(lag, gap_us) if gap_us and lag.count else None
    lagging = False
    if p99 is not None and step:
        if kernel_stamps and deaf > DEAF_SHARE_KERNEL:
            lagging = True
            reasons.append(f"the event loop was deaf for longer than the step gap {step:.2f} ms in {deaf:.1%} of "
                           f"its lag samples (p99 {p99:.2f} ms): about that share of reads may have merged two "
                           "sends")
        elif not kernel_stamps and p99 > LAG_SHARE_POLL * step:
            lagging = True
            reasons.append(f"event-loop lag p99 {p99:.2f} ms > {LAG_SHARE_POLL:.0%} of the step gap {step:.2f} ms "
                           "(no kernel receive stamps: chunks are stamped that late)")
        elif share is not None and share > COALESCED_SHARE and p99 > LAG_SHARE_POLL * step:
            lagging = True
            reasons.append(f"{coalesced_reads} reads ({share:.1%} of chunks) found several sends while the "
                           f"event loop lagged {p99:.2f} ms at p99 (step gap {step:.2f} ms)")
    busy = cpu is not None and cpu > CPU_BUSY_PCT
    if busy:
        reasons.append(f"client CPU {cpu:.0f}% of a core > {CPU_BUSY_PCT:.0f}%")
    advice = ""
    if busy:
        advice = (f"the client process used {cpu:.0f}% of a core: spread the users over more processes "
                  f"(--processes {max(2, 2 * processes)}) or cores")
    elif lagging and cpu is not None and cpu >= 50.0:
        advice = (f"the client's own work held its event loop (lag p99 {p99:.2f} ms against a step gap of "
                  f"{step:.2f} ms, {cpu:.0f}% of a core): spread the users over more processes "
                  f"(--processes {max(2, 2 * processes)})")
    elif lagging:
        advice = (f"the client's event loop was held up (lag p99 {p99:.2f} ms against a step gap of {step:.2f} ms) "
                  f"while it used only {cpu or 0:.0f}% of a core, so more --processes would not help: something "
                  "else held it — another process on its core (pin the client apart from the server, e.g. "
                  "taskset -c), or long pauses in the client itself (a slow --tokenizer, a heavy callback)")
    return SelfCheck(bool(reasons), reasons, advice, p99, step, deaf, cpu, share)
