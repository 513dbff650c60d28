"""The window's bookkeeping: which requests belong to it, when it opens, what has been folded.

In: request start instants, finished records and token counts, from a stage's
users. Out: :class:`StageState` (the window's edges [ws, we), which requests it
admitted, whether they have all finished), :class:`Steadiness` (whether the
load has settled, for an adaptive warm-up) and :class:`RecordFolder` (records
folded into the stage's accumulator one per loop iteration). The lifecycle
that drives them (warm-up, open, close, cool-down, cut) is
loadgen/run/lifecycle.py.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

from loadgen.record import RequestRecord
from loadgen.run.spec import Cut
from loadgen.stage.result import StageAccumulator

_now = time.perf_counter_ns

FAR = (1 << 62)
"""A window edge not yet known (int ns, later than any clock reading)."""
FAR_NS = int(1e18)
"""The end of a window that closes on a request count, not on time: far enough never to come."""
OPEN_AHEAD_NS = int(0.5e9)
"""An adaptive window opens this far after the load was found steady when several processes share it:
each, looking every 0.1 s (Steadiness.every_s), has fixed the same instant before it comes."""
OPEN_SCRAPE_LEAD_NS = int(0.2e9)
"""The server's counters are read this long before the window opens."""
MIN_SPAN_S = 0.5
"""The shortest span :class:`Steadiness` compares. At 0.5 s a C=1 stage of the README's chat workload on the
simulator (0.45 s requests, its prefill 15 ms of them) holds about one request, so a prefill moves the rate by
~3 %, well inside the 15 % tolerance; the 1 s floor before made every stage wait at least 2 s for its two spans
(19 of the README crossover's 36 stages opened at exactly that floor). Real servers' warm-ups are held longer
by their 5 s minimum (``--warmup``) and by spans of a quarter of their longer requests."""
ENDED_KEEP_NS = int(5e9)
"""Requests that ended this long before the window are kept for the scrape comparison (the lead, 0.2 s,
plus a scrape that waits up to a decode step: 0.75 s measured on the H200 at C=256)."""


class Steadiness:
    """Says when a closed loop has settled: every user started and the token rate flat.

    Sampled every ``every_s``; steady when the tokens that arrived over the last
    ``span_s`` and over the ``span_s`` before differ by at most ``tolerance`` of
    the larger (or by at most a few tokens on a slow server). The span is a
    quarter of a request's duration, :data:`MIN_SPAN_S`-10 s: long enough that a decode step
    or a prefill is a small part of it, short enough not to stretch the warm-up.
    """

    def __init__(self, span_s: float, tolerance: float = 0.15, every_s: float = 0.1) -> None:
        # every_s: the load is looked at every 0.1 s (was 0.25): a window opened on average 0.125 s after
        # steadiness came, now 0.05 s; a look (add and settled over at most 2 x 10 s / 0.1 s samples) takes
        # tens of microseconds of the loop
        self.span_s = span_s
        self.tolerance = tolerance
        self.every_s = every_s
        self._samples: deque[tuple[int, int]] = deque()
        self._failures: deque[tuple[int, int]] = deque()

    def add(self, t_ns: int, tokens: int, failures: int = 0) -> None:
        self._samples.append((t_ns, tokens))
        self._failures.append((t_ns, failures))
        while len(self._failures) > 2 and self._failures[1][0] <= t_ns - int(self.span_s * 1e9):
            self._failures.popleft()
        horizon = t_ns - int(2 * self.span_s * 1e9) - int(self.every_s * 2e9)
        while len(self._samples) > 2 and self._samples[1][0] <= horizon:
            self._samples.popleft()

    def _at(self, t_ns: int) -> tuple[int, int] | None:
        """The last sample (time, tokens) at or before ``t_ns``."""
        best = None
        for sample in self._samples:
            if sample[0] > t_ns:
                break
            best = sample
        return best

    def settled(self) -> bool:
        if not self._samples:
            return False
        t, now = self._samples[-1]
        mid, old = self._at(t - int(self.span_s * 1e9)), self._at(t - int(2 * self.span_s * 1e9))
        if mid is None or old is None or not (old[0] < mid[0] < t):
            return False
        # rates, not counts: the two spans differ by up to one sampling interval
        recent = (now - mid[1]) / (t - mid[0]) * self.span_s * 1e9
        before = (mid[1] - old[1]) / (mid[0] - old[0]) * self.span_s * 1e9
        if recent <= 0:
            # nothing arriving is not a steady load, however flat — unless requests are failing: a
            # server that died or refuses steadily is measured as that (its failures counted), not waited on
            return self._failures[-1][1] > self._failures[0][1]
        return abs(recent - before) <= max(self.tolerance * max(recent, before), 3)


class StageState:
    """Which requests belong to the window, and when the window and the stage end.

    ``ws``/``we`` may be unknown (``FAR``) until the warm-up has found the load
    steady; :meth:`open` fixes them.
    """

    def __init__(self, ws: int, we: int, max_requests: int | None) -> None:
        self.ws, self.we = ws, we
        self.t0 = ws
        self.max_requests = max_requests
        self.admitted = 0
        self.first_done = 0
        """Users whose first request has ended."""
        self.failures = 0
        """Requests that failed so far (any phase): a failing server's load is steady at zero tokens."""
        self.warm_users = 0
        """Users whose first request had ended when the window opened."""
        self.not_streaming: int | None = None
        """Users whose first request was neither ended nor streaming when the window opened (None: not told)."""
        self.inside_running = 0
        self.stop_new = False
        self.warmup_capped = False
        self.warmup_squeezed = False
        """The stage's budget brought the warm-up's cap forward."""
        self.measured_steady = False
        """The window opened because the load was measured steady (not at a fixed warm-up or its cap)."""
        self.cut: Cut | None = None
        self.server: dict | None = None
        self._closed = asyncio.Event()
        self._inside_done = asyncio.Event()

    def open(self, ws: int, window_ns: int | None) -> None:
        self.ws = ws
        self.we = ws + window_ns if window_ns is not None else ws + FAR_NS

    def phase(self, t: int) -> str:
        if self.ws == FAR or t < self.ws:
            return "warm-up"
        return "cool-down" if self.window_closed else "window"

    def cut_here(self, by: str) -> None:
        t = _now()
        self.cut = Cut(self.phase(t), (t - self.t0) / 1e9, by)

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


SEND_CLEARANCE_NS = 2_000_000
"""A record's fold holds the loop for up to about a millisecond (ten metrics, binned histograms); an open
loop's send that falls due meanwhile waits for it: lag p99 1.2 ms at 50 req/s on a quiet 16-core host,
lag p50 0.16 ms. So no fold starts when a send is due within this long; it waits until just after it."""
AFTER_SEND_S = 0.0003
MAX_DEFER_NS = 50_000_000
"""At rates where sends are always that close, folds go on after this long (records must not pile up)."""


class RecordFolder:
    """Folds finished records into the accumulator one per event-loop iteration.

    The loop that folds is the loop that reads the streams and sends the next
    requests. When many streams end in one decode step, folding all their
    records in one go held it for tens of milliseconds (50 streams of 200
    chunks: 60 ms): every user's next request waited that long, and where the
    kernel gives no receive stamp (loadgen.client.loops) reads that arrived meanwhile
    were stamped with a stale poll instant. One record per iteration keeps each
    hold to about a third of a millisecond (200 chunks).
    """

    def __init__(self, acc: StageAccumulator | None) -> None:
        self.acc = acc
        """None until the window is fixed (adaptive warm-up): records finished before it are dropped."""
        self.pending: deque[RequestRecord] = deque()
        self._wake = asyncio.Event()
        self.next_send: Callable[[], int | None] | None = None
        """An open loop's next planned send (perf_counter ns), or None: a fold is not started that close to
        one, so the send is not held behind it (see :data:`SEND_CLEARANCE_NS`)."""

    def attach(self, acc: StageAccumulator) -> None:
        self.acc = acc
        self._wake.set()

    def put(self, rec: RequestRecord) -> None:
        if self.acc is None or rec.end_ns < self.acc.lo:
            return  # ended in the warm-up: no chunk in the window, not started in it
        self.pending.append(rec)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                await self._clear_of_send()
                self.acc.add(self.pending.popleft())
                await asyncio.sleep(0)

    async def _clear_of_send(self) -> None:
        """Wait until no planned send falls due within a fold's time (at most MAX_DEFER_NS in all)."""
        if self.next_send is None:
            return
        t0 = _now()
        while True:
            due, now = self.next_send(), _now()
            if due is None or not (now <= due < now + SEND_CLEARANCE_NS) or now - t0 > MAX_DEFER_NS:
                return
            await asyncio.sleep((due - now) / 1e9 + AFTER_SEND_S)

    def drain(self) -> None:
        while self.pending:
            self.acc.add(self.pending.popleft())
