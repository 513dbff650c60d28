"""One process's share of an open-loop stage, on the asyncio side of the bridge.

In: a :class:`StagePlan` with a ``rate`` (and this process's share of it). Out: the share's
:class:`StageResult` with its ``open_loop`` block (planned, sent, held by the cap), and batches of
finished records for Locust's statistics, as :class:`LiveStage` gives them.

Locust's users are closed loops: a user waits for its request before it sends the next, so the
users, not a schedule, set when requests go (``constant_throughput`` paces each user, bounded by
the user count and blind to its own lateness). Here no user sends: one dispatcher per load process
sends on the schedule ``loadgen run --rate`` sends (loadgen/run/openloop.py: the same arrivals,
seeded by the run's seed and the rate, the same prompts by seed + ladder step, the same in-flight
cap and dispatch-lag bound, the same window lifecycle and its settings), and process k of n sends
arrivals k, k+n, k+2n, … so the union is the one schedule. Each finished request still becomes one
Locust request event (``LiveStage._emit``), so Locust's tables and charts show the rates.

What it shares with the closed-loop LiveStage is the Locust side: the window on this process's
clock for the master's scrapes (``window``), what the process saw near the window's edges
(loadgen/locust/edges.py), the hold until the master's closing scrape, the phases for the web UI.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

from loadgen.client.stream import StreamClient
from loadgen.run.lifecycle import Lifecycle, frozen_heap
from loadgen.run.openloop import Dispatcher, cap_share
from loadgen.stage.result import StageResult

from loadgen.locust.edges import EdgeLog
from loadgen.locust.live import DONE, HOLD_NS, WARMUP, LiveStage

_now = time.perf_counter_ns


def _original_sleep():
    """time.sleep as it was before gevent patched it: on the bridge's thread the patched one would run a
    gevent hub of that thread's own (the bridge's rule: nothing there blocks on gevent)."""
    try:
        import gevent.monkey

        return gevent.monkey.get_original("time", "sleep")
    except ImportError:  # pragma: no cover - Locust brings gevent
        return time.sleep


_sleep = _original_sleep()


class OpenLiveStage(LiveStage):
    """An open-loop stage's share in this process: a dispatcher, no users (see the module doc)."""

    async def run(self) -> StageResult:
        plan = self.plan
        begun = _now()
        self._ready = asyncio.Event()
        spec = plan.spec()
        cap = cap_share(spec.concurrency, self.share, self.n_shares)
        # the schedule from the run's seed (the arrivals key it by rate too), the prompts from seed + step:
        # every target at a rate gets the same requests at the same planned instants
        pairs = itertools.islice(zip(spec.arrivals.times(plan.seed), plan.requests_iter()), self.share, None,
                                 self.n_shares)
        tokenizer = None
        if plan.tokenizer:
            from loadgen.client.tokencount import load_counter

            tokenizer = load_counter(plan.tokenizer)
        try:
            with frozen_heap():
                # no connection limit without a cap: aiohttp's pool would queue sends past it, unseen
                async with StreamClient(
                    self.target.url, self.target.make_protocol(), target=self.target.label, concurrency=cap,
                    timeouts=plan.make_timeouts(), headers=self.target.headers, tokenizer=tokenizer,
                ) as client:
                    self._client = client
                    await client.warm(min(cap or 8, 64))
                    start_at = plan.start_at_ns if plan.start_at_ns is not None else begun + int(plan.spawn_s * 1e9)
                    await asyncio.sleep(max(0.0, (start_at - _now()) / 1e9))
                    t0 = max(start_at, _now()) if plan.start_at_ns is None else start_at
                    # loadgen run --rate's lifecycle settings (its notes; a cool-down past its bound is a cut
                    # that keeps the window, which the saturation reading takes as such), not the closed
                    # Locust stage's: an open-loop stage reads the same from either front
                    self._life = life = Lifecycle(spec, plan.make_slo(), t0, 0, on_phase=self._set_phase)
                    state, folder = life.state, life.folder
                    if plan.scraped:
                        self.edges = EdgeLog(state.ws, state.we, socket.gethostname())

                    def finished(rec) -> None:
                        if self.edges is not None:
                            self.edges.add(rec)
                        self._emit(rec)

                    sender = Dispatcher(client, life, pairs, t0, cap, self.tag, finished=finished, sleep=_sleep)
                    helpers = [asyncio.create_task(sender.run()), asyncio.create_task(folder.run())]
                    self.phase = WARMUP
                    self._ready.set()
                    try:
                        await life.drive()
                        if self.edges is not None and state.cut is None:
                            await self._hold(state.we + HOLD_NS)  # the schedule goes on while the master reads
                    finally:
                        if self.edges is not None:
                            self._close_edges(client.inflight)
                        self.accepting = False
                        await life.teardown(helpers + list(sender.running), client.inflight, wait_s=5.0)
                        self._flush()
        finally:
            self.accepting = False
            self.phase = DONE
            self._ready.set()
        self.result = res = life.result(self.target, plan.index)
        res.open_loop = sender.block(spec)
        return res

    async def user_loop(self) -> None:
        """No user sends in an open loop (the dispatcher does): a Locust user given this stage idles."""
        return None
