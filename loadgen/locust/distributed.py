"""Master/worker plumbing: stage plans out by custom message, stage results back by worker report.

Worker side: a ``loadgen_stage`` message carries a :class:`StagePlan`; the
worker runs its share (every n-th request of the stage's sequence, its share
of the users as dispatched by Locust) and, when its part of the stage is
over, puts the encoded StageResult (HDR histograms as compressed base64,
counters, timelines) in an outbox that the next ``report_to_master`` carries;
it asks for that report at once rather than waiting for the 3 s tick.

Master side: ``worker_report`` hands each part to the conductor, which merges
them exactly and notices workers that went missing (see conductor.py).
"""

from __future__ import annotations

import logging
import os
import socket

import gevent

from .executor import Executor
from loadgen.locust.stageplan import StagePlan

log = logging.getLogger("loadgen.locust")

REPORT_KEY = "loadgen_stages"
STAGE_MSG = "loadgen_stage"
ABORT_MSG = "loadgen_abort"
SCRAPED_MSG = "loadgen_scraped"
"""The master read the server after the window: the workers' users need not be held for it any longer."""
READY_KEY = "loadgen_ready"
"""In every worker report: the worker's handlers are registered, and the master gives a stage share only to
workers that said so. Locust fires ``init`` (where they are registered) after the worker has connected and said
ready to Locust: measured, a worker joining a running stage got its ``loadgen_stage`` message 163 ms after
connecting, before its handler existed ("Unknown message type received"), ran no request of it, and the master
waited on its share for 90 s. A report, not a custom message: the master may not have registered its own
handlers yet either (it starts the simulators first), and a lost report is followed by the next one 3 s later."""
MASTER_TIMEOUT_S = float(os.environ.get("LOADGEN_MASTER_TIMEOUT_S", "10"))
"""A worker that hears no heartbeat from its master for this long quits (Locust's own MASTER_HEARTBEAT_TIMEOUT is
60 s: measured, workers whose master was SIGKILLed mid-stage exited 60.6 s later, their users streaming against
the target meanwhile). The master answers each worker heartbeat (every 1 s) and itself gives a worker up after
3 missed ones, so 10 s without an answer is a master gone, not a busy one."""


def setup_worker(environment, runner) -> Executor:
    import locust.runners

    # read at each check by WorkerRunner.heartbeat_timeout_checker (a module global)
    locust.runners.MASTER_HEARTBEAT_TIMEOUT = MASTER_TIMEOUT_S
    outbox: list[dict] = []

    def send_now() -> None:
        send = getattr(runner, "_send_stats", None)  # the same call the 3 s reporter makes
        if send is not None:
            try:
                send()
            except Exception as exc:  # the periodic report will carry it
                log.warning("loadgen: immediate report failed (%s); the next periodic report carries it", exc)

    def on_result(item: dict) -> None:
        outbox.append(item)
        gevent.spawn(send_now)

    ex = Executor(on_result, worker_id=runner.client_id, events=environment.events)
    environment.loadgen_executor = ex

    def on_report(client_id, data, **kw) -> None:
        data[READY_KEY] = True
        if outbox:
            data[REPORT_KEY] = list(outbox)
            outbox.clear()

    environment.events.report_to_master.add_listener(on_report)

    def on_stage(environment, msg, **kw) -> None:
        plan = StagePlan.from_msg(msg.data)
        share = plan.shares.get(runner.client_id)
        if share is None:
            log.info("loadgen: stage %d is not for this worker (joined later); idle", plan.index + 1)
            ex.abort()
            return
        if plan.host != socket.gethostname():
            plan.start_at_ns = None  # CLOCK_MONOTONIC is per machine: start after warming up instead
        ex.begin(plan, share, len(plan.shares))

    def on_abort(environment, msg, **kw) -> None:
        ex.abort()

    def on_scraped(environment, msg, **kw) -> None:
        ex.scrape_closed(msg.data.get("key"))

    runner.register_message(STAGE_MSG, on_stage)
    runner.register_message(ABORT_MSG, on_abort)
    runner.register_message(SCRAPED_MSG, on_scraped)
    gevent.spawn(send_now)  # READY_KEY now, after the handlers: the master's next message finds them
    return ex


def setup_master(environment, conductor) -> None:
    def on_worker_report(client_id, data, **kw) -> None:
        if data.get(READY_KEY):
            conductor.ready(client_id)
        for item in data.get(REPORT_KEY, ()):
            item.setdefault("worker", client_id)
            conductor.add_part(item)

    environment.events.worker_report.add_listener(on_worker_report)
