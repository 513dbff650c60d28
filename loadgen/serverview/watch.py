"""What a stage holds to watch its server: scrapes at the window's edges and every few seconds between.

In: a base URL, a sampling interval (``--server-metrics-interval``, default 1 s). Out: from
:meth:`ServerWatch.close`, the stage's ``server`` block (``summary``).

The edges are full pages (counters, histograms); the samples between them read only the gauges
and a few counters (to see a restart), filtered before the parser. They run in a thread of their
own, so the client's event loop never waits for a page: the edges through ``asyncio.to_thread``
from the runner, directly from the gevent Locust master. Holds only its settings until
``open()``: a stage's worker process can be handed one.

Measured cost (bench/, ``loadgen bench client --server-metrics-interval``): see docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import threading

from loadgen.engines import get
from loadgen.serverview.page import Snapshot, fetch, line_filter
from loadgen.serverview.summary import window_summary

MAX_SAMPLES = 100_000
"""Samples kept per window (a day at 1 s); later ones are dropped with a note, memory stays bounded."""


def running_cap(probed: dict | None) -> int | None:
    """The running cap a probe (loadgen.run.probe) found: SGLang's max_running_requests, llama.cpp's slots."""
    info = (probed or {}).get("server_info") or {}
    for key in ("max_running_requests", "total_slots"):
        v = info.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        v = states[0].get("max_running_requests")
        if isinstance(v, int) and v > 0:
            return v
    return None


class ServerWatch:
    def __init__(self, base_url: str, interval_s: float = 1.0, timeout_s: float = 5.0,
                 headers: dict | None = None, max_running: int | None = None) -> None:
        self.base_url = base_url
        self.max_running = max_running
        """The server's running cap, for the running-batch check (None: not known)."""
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.span_ns: tuple[int, int] | None = None
        """(open, close) scrape midpoints on loadgen's clock, once ``close`` returned."""
        self.edges_ns: tuple[tuple[int, int], tuple[int, int]] | None = None
        """Each edge scrape's (sent, answered) on loadgen's clock: the server read its counters somewhere
        in between (llama.cpp answered 300 ms late at C=256 on the H200)."""
        self._before: Snapshot | None = None
        self._samples: list[Snapshot] = []
        self._failed: list[str] = []
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        """Set by ``stop_sampling``: an ``open`` still fetching its page then starts no sampler."""

    def __getstate__(self) -> dict:
        # pickled into a stage's worker process before use: settings only
        return {"base_url": self.base_url, "interval_s": self.interval_s, "timeout_s": self.timeout_s,
                "headers": self.headers, "max_running": self.max_running}

    def __setstate__(self, d: dict) -> None:
        self.__init__(**d)

    def scrape(self) -> Snapshot:
        return fetch(self.base_url, self.timeout_s, self.headers)

    # --- blocking face (the Locust master, tests) ------------------------------------------------
    def open(self) -> None:
        """Scrape the window's opening page and start sampling between."""
        with self._lock:
            self._stopped = False
        self._before = self.scrape()
        self._samples, self._failed = [], []
        metrics = get(self._before.engine).metrics if self._before.ok else None
        with self._lock:
            if self.interval_s > 0 and metrics is not None and not self._stopped:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._sample, args=(metrics.interval_names(), self._stop),
                                                name="loadgen-serverwatch", daemon=True)
                self._thread.start()

    def _sample(self, only: set[str], stop: threading.Event) -> None:
        keep = line_filter(only)
        while not stop.wait(self.interval_s):
            # lines kept, parsed at the close: 0.4 ms of the client's interpreter a sample with the parse,
            # measured on the simulator's page; the parse (prometheus_client, pure Python) waits
            snap = fetch(self.base_url, self.timeout_s, headers=self.headers, keep=keep)
            if stop.is_set():
                break
            if not snap.error:
                if len(self._samples) < MAX_SAMPLES:
                    self._samples.append(snap)
            else:
                self._failed.append(snap.error)

    def stop_sampling(self) -> None:
        with self._lock:
            self._stopped = True
            stop, thread = self._stop, self._thread
            self._stop = self._thread = None
        if stop is not None:
            stop.set()
            thread.join(self.timeout_s + 1)

    def close(self) -> dict:
        """Stop sampling, scrape the closing page, and summarise the window."""
        self.stop_sampling()
        after = self.scrape()
        if self._before is not None:
            self.span_ns = (self._before.t_ns, after.t_ns)
            self.edges_ns = tuple((x.t_ns - x.rtt_ns // 2, x.t_ns + x.rtt_ns - x.rtt_ns // 2)
                                  for x in (self._before, after))
        samples = [x.finish() for x in self._samples]
        failed = self._failed + [x.error for x in samples if not x.ok]
        return window_summary(self._before, after, [x for x in samples if x.ok], failed, self.interval_s)

    # --- the runner's WindowProbe face (loadgen.run.spec) ----------------------------------------
    async def at_open(self) -> None:
        await asyncio.to_thread(self.open)

    async def at_close(self) -> dict:
        return await asyncio.to_thread(self.close)
