"""The gevent side of a load-generating Locust process (local runner or worker).

Holds the bridge and the stage this process is running. ``begin(plan)`` starts
the stage on the asyncio thread; when it ends, its result (a StageResult dict)
goes to ``on_result`` in a greenlet — the conductor directly (local runner) or
the worker's outbox for ``report_to_master`` (distributed). Each Locust user
runs :meth:`Executor.run_user`: one closed-loop user on the asyncio side for as
long as the stage admits requests. Finished records come back in batches to a
reporter greenlet, which puts them in Locust's statistics (``events.request``).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Callable

import gevent
import gevent.event
import gevent.queue

from loadgen.errors import LoadgenError

from .bridge import Bridge, Cancelled
from .live import LiveStage
from loadgen.locust.stageplan import StagePlan

log = logging.getLogger("loadgen.locust")

ResultSink = Callable[[dict], None]
"""Receives ``{"key", "index", "worker", "result": stage dict | None, "error": str | None}``."""

IDLE_WAIT_S = 1.0


class Executor:
    def __init__(self, on_result: ResultSink, worker_id: str = "local", events=None) -> None:
        self.on_result = on_result
        self.worker_id = worker_id
        self.events = events
        """Locust's events (for ``request``); None: records are not reported to Locust."""
        self.bridge: Bridge | None = None
        self.stage: LiveStage | None = None
        self._run_call = None
        self._new_stage = gevent.event.Event()
        self._batches: gevent.queue.Queue = gevent.queue.Queue()
        self._reporter = gevent.spawn(self._report_loop)

    # --- stages -------------------------------------------------------------------------------
    def begin(self, plan: StagePlan, share: int = 0, n_shares: int = 1) -> None:
        self.abort()
        if plan.cpus and plan.host == socket.gethostname():
            try:
                os.sched_setaffinity(0, set(plan.cpus))
            except (AttributeError, OSError):
                pass
        if self.bridge is None:
            self.bridge = Bridge(plan.knobs.loop).start()
        bridge, protocol = self.bridge, plan.target.get("protocol", "llm")

        def sink(batch: list) -> None:  # loop thread → hub → reporter greenlet
            bridge.post(self._batches.put_nowait, (protocol, batch))

        # an open loop's stage sends on its schedule (one dispatcher); its users idle (LiveStage.user_loop)
        stage = LiveStage(plan, share, n_shares, tag=f"{plan.label}-s{plan.index}-p{share}", sink=sink)
        self.stage = stage
        call = self._run_call = self.bridge.submit(stage.run)
        gevent.spawn(self._await_result, stage, call)
        woken, self._new_stage = self._new_stage, gevent.event.Event()
        woken.set()

    def _await_result(self, stage: LiveStage, call) -> None:
        item = {"key": stage.plan.key, "index": stage.plan.index, "worker": self.worker_id,
                "result": None, "error": None}
        try:
            item["result"] = call.result.get().to_dict()
            item["edges"] = stage.edges_done  # what it saw near the window's edges, for the master's scrapes
        except Cancelled:
            return  # aborted: the test was stopped
        except LoadgenError as exc:
            item["error"] = str(exc)
        except Exception as exc:  # a bug, but the conductor must hear about it rather than wait
            log.exception("loadgen: stage %s failed in %s", stage.plan.index, self.worker_id)
            item["error"] = f"{type(exc).__name__}: {exc}"
        self.on_result(item)

    def scrape_closed(self, key: str) -> None:
        """The master's closing scrape of stage ``key`` is done: its users need not be held any longer."""
        if self.stage is not None and self.stage.plan.key == key:
            self.stage.scrape_closed = True  # read by the loop thread (a plain attribute, polled)

    def abort(self) -> None:
        """Cancel the running stage, if any (its result is dropped)."""
        if self._run_call is not None and self.bridge is not None and not self._run_call.result.ready():
            self.bridge.cancel(self._run_call)
        if self.stage is not None:
            self.stage.accepting = False
        self._run_call = None

    # --- users (greenlets) ----------------------------------------------------------------------
    def run_user(self) -> None:
        """Be one user of the current stage until it admits no more requests (blocks this greenlet).

        With no stage admitting requests, sleep until the next stage begins (or a
        second passes), so idle users cost nothing. If Locust kills the greenlet,
        the asyncio side of the user is cancelled with it.
        """
        stage = self.stage
        if stage is None or not stage.accepting or self.bridge is None:
            self._new_stage.wait(IDLE_WAIT_S)
            return
        try:
            self.bridge.call(stage.user_loop)
        except Cancelled:
            pass
        if self.stage is stage:
            self._new_stage.wait(IDLE_WAIT_S)

    def _report_loop(self) -> None:
        from .user import report

        while True:
            protocol, batch = self._batches.get()
            if self.events is not None:
                for rec in batch:
                    report(self.events, rec, protocol)

    def close(self) -> None:
        self.abort()
        if self.bridge is not None:
            self.bridge.stop()
            self.bridge = None
        self._reporter.kill(block=False)
