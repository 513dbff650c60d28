"""The gevent side of a load-generating Locust process (local runner or worker).

Holds the bridge and the stage this process is running. ``begin(plan)`` starts
the stage on the asyncio thread; when it ends, its result (a StageResult dict)
goes to ``on_result`` in a greenlet — the conductor directly (local runner) or
the worker's outbox for ``report_to_master`` (distributed). Users ask
:meth:`Executor.request` for their next record.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Callable

import gevent
import gevent.event

from loadgen.errors import LoadgenError
from loadgen.record import RequestRecord

from .bridge import Bridge, Cancelled
from .live import LiveStage
from .plan import StagePlan

log = logging.getLogger("loadgen.locust")

ResultSink = Callable[[dict], None]
"""Receives ``{"key", "index", "worker", "result": stage dict | None, "error": str | None}``."""

IDLE_WAIT_S = 1.0


class Executor:
    def __init__(self, on_result: ResultSink, worker_id: str = "local") -> None:
        self.on_result = on_result
        self.worker_id = worker_id
        self.bridge: Bridge | None = None
        self.stage: LiveStage | None = None
        self._run_call = None
        self._new_stage = gevent.event.Event()

    # --- stages -------------------------------------------------------------------------------
    def begin(self, plan: StagePlan, share: int = 0, n_shares: int = 1) -> None:
        self.abort()
        if plan.cpus and plan.host == socket.gethostname():
            try:
                os.sched_setaffinity(0, set(plan.cpus))
            except (AttributeError, OSError):
                pass
        if self.bridge is None:
            self.bridge = Bridge(plan.loop).start()
        stage = LiveStage(plan, share, n_shares, tag=f"{plan.label}-s{plan.index}-p{share}")
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
        except Cancelled:
            return  # aborted: the test was stopped
        except LoadgenError as exc:
            item["error"] = str(exc)
        except Exception as exc:  # a bug, but the conductor must hear about it rather than wait
            log.exception("loadgen: stage %s failed in %s", stage.plan.index, self.worker_id)
            item["error"] = f"{type(exc).__name__}: {exc}"
        self.on_result(item)

    def abort(self) -> None:
        """Cancel the running stage, if any (its result is dropped)."""
        if self._run_call is not None and self.bridge is not None and not self._run_call.result.ready():
            self.bridge.cancel(self._run_call)
        if self.stage is not None:
            self.stage.accepting = False
        self._run_call = None

    def close(self) -> None:
        self.abort()
        if self.bridge is not None:
            self.bridge.stop()
            self.bridge = None

    # --- users (greenlets) ----------------------------------------------------------------------
    def request(self) -> RequestRecord | None:
        """One request of the current stage, streamed on the asyncio side; None: nothing to do now.

        When no stage is admitting requests the calling greenlet sleeps until the
        next stage begins (or a second passes), so idle users cost nothing.
        """
        stage = self.stage
        if stage is None or not stage.accepting or self.bridge is None:
            self._new_stage.wait(IDLE_WAIT_S)
            return None
        try:
            rec = self.bridge.call(stage.one)
        except Cancelled:
            return None
        if rec is None:
            self._new_stage.wait(IDLE_WAIT_S)
        return rec
