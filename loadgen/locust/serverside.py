"""The master's view of each stage's server: one scraper per stage, the cache reset before it, the checks.

In: a stage's plan, where its window lies on the master's clock (local runner: read from the
stage's own lifecycle; distributed: the plan's shared start plus its fixed warm-up), and, when the
stage is over, every load process's edge record (loadgen/locust/edges.py). Out: the merged stage's
``server`` block (loadgen.serverview: counters over the window, gauges sampled every
``--server-metrics-interval``, the client-vs-server checks) and its notes, prefixed "server: " as
``loadgen run`` writes them; ``cache_reset`` when ``--reset-cache`` asked for one.

Only the master (or the local runner's process) scrapes: the workers run ``window_probe=None``
lifecycles and only keep their edges, so the server is read once per sample, not once per worker.
Runs in gevent (the master's hub): ServerWatch's blocking face uses plain threads and http.client,
which Locust's monkey-patching makes cooperative.
"""

from __future__ import annotations

import time
from typing import Callable

from loadgen.engines import PAGE_TIMEOUT_S, identify_with
from loadgen.run.ramp import cache_reset
from loadgen.run.window import OPEN_SCRAPE_LEAD_NS
from loadgen.serverview import wire
from loadgen.serverview.checks import ClientView, add_checks
from loadgen.serverview.watch import ServerWatch, running_cap
from loadgen.stage.result import StageResult

from loadgen.locust.edges import combine
from loadgen.locust.stageplan import StagePlan

_now = time.perf_counter_ns
WINDOW_WAIT_S = 60.0
"""How long the scraper waits for a local stage to fix its window (its client warms first) before giving up."""


def probe_info(url: str, headers: dict | None = None) -> dict:
    """What loadgen.run.probe finds (engine, ``server_info``), asked the same way (loadgen.engines.identify),
    with blocking http.client: the probe's aiohttp needs an asyncio loop the gevent hub has not got."""
    hdrs = dict(headers or {})
    engine, info = identify_with(lambda path: wire.get_page(url, path, timeout_s=PAGE_TIMEOUT_S, headers=hdrs))
    return {"engine": engine, "server_info": info}


class StageServer:
    """Scrapes one stage's target around its window, from a greenlet of the master's."""

    def __init__(self, plan: StagePlan, interval_s: float, probed: dict | None,
                 window: Callable[[], tuple[int, int] | None], on_closed: Callable[[], None] | None = None) -> None:
        import gevent

        target = plan.make_target()
        self.plan = plan
        self.watch = ServerWatch(target.url, interval_s, headers=target.headers, max_running=running_cap(probed))
        self.window = window
        self.on_closed = on_closed
        self.block: dict | None = None
        self.open_at: tuple[int, int] | None = None
        self.close_at: tuple[int, int] | None = None
        self.why_not: str | None = None
        self.greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        import gevent

        give_up = time.monotonic() + WINDOW_WAIT_S
        w = self.window()
        while w is None:
            if time.monotonic() > give_up:
                self.why_not = "not scraped: the stage's window was not fixed in time"
                return
            gevent.sleep(0.01)
            w = self.window()
        ws, we = w
        gevent.sleep(max(0.0, (ws - OPEN_SCRAPE_LEAD_NS - _now()) / 1e9))
        a = _now()
        self.watch.open()
        self.open_at = (a, _now())
        gevent.sleep(max(0.0, (we - _now()) / 1e9))
        a = _now()
        self.block = self.watch.close()
        self.close_at = (a, _now())
        if self.on_closed is not None:
            self.on_closed()

    @property
    def done(self) -> bool:
        return self.greenlet.ready()

    @property
    def opened(self) -> bool:
        return self.open_at is not None

    def abort(self) -> None:
        self.greenlet.kill(block=False)
        self.watch.stop_sampling()

    def finish(self, merged: StageResult, edges: list[dict | None], host: str) -> None:
        """Put the block, its checks and its notes on the merged stage."""
        self.greenlet.join(30.0)
        block = self.block
        if block is None:
            if self.why_not is None and self.opened:
                self.why_not = "not scraped: the closing scrape did not finish"
            if self.why_not is not None:
                merged.notes.append(f"server: {self.why_not}")
            self.watch.stop_sampling()
            return
        why = None
        if any(e is None for e in edges):
            why = "a load process's record of the window's edges is missing (lost, failed or cut)"
            sides = None
        else:
            sides = combine(edges, host, self.watch.span_ns, self.open_at, self.close_at)
            why = sides.why
        with_checks(block, self.plan.concurrency, self.watch.max_running, sides if why is None else None, why,
                    open_loop=self.plan.open_loop)
        merged.server = block
        merged.notes.extend(f"server: {n}" for n in block.get("notes", []))


def with_checks(block: dict, concurrency: int, cap: int | None, sides, why: str | None,
                open_loop: bool = False) -> dict:
    """loadgen.serverview.checks over the whole stage's client (every process's counts added, so the view
    is one client's: ``processes`` 1); where the counts cannot be set against the scrapes soundly,
    the token and acceptance checks say "not comparable" and why, and the running batch (a server
    figure against the stage's C; an open loop's is the arrivals', held to no C) is still checked."""
    if sides is not None:
        return add_checks(block, ClientView(concurrency, 1, sides.ended, sides.tokens_open, sides.tokens_close, cap,
                                            open_loop=open_loop, past_first_open=sides.past_first_open,
                                            past_first_close=sides.past_first_close))
    return add_checks(block, ClientView(concurrency, 1, max_running=cap, open_loop=open_loop, not_comparable=why))


def reset_before(plan: StagePlan, probed: dict | None) -> dict:
    """--reset-cache: empty the stage's target's prefix cache now (loadgen.run.ramp.cache_reset)."""
    return cache_reset(plan.make_target(), probed)
