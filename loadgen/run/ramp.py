"""The scripted two-target ramp: the same ladder and prompts for a baseline and a speculative server.

In: a :class:`RampPlan` (targets, ladder, workloads, budgets) and a results
writer. Out: every stage's dict, written the moment the stage ends, and the
run's ``planned_stages`` and ``cut``. The order of the stages and the plan of
each (steady warm-up, window, budget, estimates) come from loadgen/run/order.py,
the same order the Locust ramp runs; this module starts servers, runs each
stage (loadgen/run/processes.py) and reports as it goes.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from loadgen.client.target import Target
from loadgen.errors import LoadgenError
from loadgen.run.orchestrate import ANNOUNCE_AFTER_S, ManagedServer, ServerCommand
from loadgen.run.order import (NO_GUESS_MAX_WARMUP_S, Durations, OpenPlan, Schedule, e2e_guess, fmt_s,
                               prompt_seed, stage_order, warmed_spec)
from loadgen.run.probe import probe_target
from loadgen.run.processes import run_stage_processes
from loadgen.run.progress import ProgressLine
from loadgen.run.results import ResultsWriter
from loadgen.serverview.page import fetch
from loadgen.serverview import simclock
from loadgen.serverview.reset import reset_cache
from loadgen.serverview.watch import ServerWatch, running_cap
from loadgen.run.spec import Interrupted, RequestSource, RunOptions, WindowProbe
from loadgen.run import stops
from loadgen.run.stops import RunBudget, Saturation
from loadgen.stage.result import stage_load

__all__ = ["NO_GUESS_MAX_WARMUP_S", "RampPlan", "e2e_guess", "log", "run_ramp", "warmed_spec"]


@dataclass
class RampPlan:
    targets: list[Target]
    """Baseline first, speculative second."""
    ladder: list[int]
    workloads: list[str]
    make_source: Callable[[str], RequestSource]
    opts: RunOptions
    duration_s: float | None = 30.0
    requests: int | None = None
    warmup_s: float = 5.0
    processes: int = 1
    loop: str = "auto"
    commands: dict[str, ServerCommand] = field(default_factory=dict)
    """label → how to start that target's server (optional)."""
    max_stage_s: float | None = None
    """--max-stage-time: no stage runs longer (cut where it is, kept, noted)."""
    max_run_s: float | None = None
    """--max-run-time: the run's budget, shared out between the stages still to run."""
    adapt_window: bool = False
    """The window was not chosen by the user: it grows to a request's duration, within the budget."""
    window_probe: Callable[[Target], WindowProbe | None] | None = None
    """target → what watches its server at the window's edges; default: its /metrics (loadgen.serverview)."""
    server_metrics_interval: float = 1.0
    """--server-metrics-interval: seconds between the samples of /metrics inside a window (0: edges only)."""
    reset_cache: bool = False
    """--reset-cache: empty the server's prefix cache before each stage."""
    open: OpenPlan | None = None
    """An open-loop ladder: ``ladder`` holds rates (req/s) or, with a trace, its speeds."""
    climb_past_saturation: bool = False
    """Open loop: go on to higher rates for a target after one of its stages saturated."""
    repeat: int = 1
    """--repeat: each workload's ladder run this many times, pass after pass (loadgen.run.order.stage_order);
    each stage's dict says its pass (``repeat``), and the analysis gives the spread across passes."""
    looks: int = 1
    """--passes: at most this many passes, the later ones over the load points still open (cli/crossover)."""

    @property
    def axis(self) -> str:
        """What the ladder's values are: "concurrency", "rate" (req/s) or "trace_speed"."""
        if self.open is None:
            return "concurrency"
        return "trace_speed" if self.open.trace_times is not None else "rate"

    def load_of(self, value) -> float:
        """Where a stage at this ladder value sits on its ladder, as its dict says (stage_load): C, or the
        offered rate (a trace's replay rate at that speed)."""
        return value if self.open is None else self.open.schedule(value).rate

    def stages(self) -> list[tuple[str, int, Target]]:
        """(workload, C, target) in the order they run (loadgen.run.order.stage_order): one server at a time
        when loadgen starts them."""
        return [(s.workload, s.value, s.target) for s in self.slots()]

    def slots(self, extra_stages: list[tuple] | tuple = ()):
        return stage_order(self.targets, self.ladder, self.workloads, by_target=bool(self.commands),
                           extra=extra_stages, axis=self.axis, repeats=self.repeat)


def log(msg: str) -> None:
    print(f"loadgen: {msg}", file=sys.stderr, flush=True)


def run_ramp(plan: RampPlan, writer: ResultsWriter, *, extra_stages: list[tuple] = ()) -> list[dict]:
    """Run every stage of the plan (then ``extra_stages`` for every target: (workload, C) a refinement's, (workload,
    C, step, pass) another pass at a ladder's step); returns the stage dicts.

    Before the first stage the run's duration is estimated and printed; each
    stage's header and progress line say how much is left. With ``max_run_s``
    each stage gets the share of the time left that its estimate is of the
    stages left (loadgen.run.order.Schedule.budget); when the budget is spent
    the run stops, and ``run["cut"]`` says how many planned stages were not run.
    What keeps a stage from running (saturation, the budget) is loadgen/run/stops.py.
    """
    return _Ramp(plan, writer, extra_stages).run()


class _Ramp:
    """One run of the plan's stages: servers up as needed, each stage measured (again once if its server
    died), written, and told; the stop conditions consulted before and after each."""

    def __init__(self, plan: RampPlan, writer: ResultsWriter, extra_stages) -> None:
        self.plan, self.writer = plan, writer
        self.done: list[dict] = []
        self.running: dict[str, ManagedServer] = {}
        self.servers = writer.run.setdefault("servers", {})
        self.sources = {w: plan.make_source(w) for w in plan.workloads}
        self.slots = slots = plan.slots(extra_stages)
        planned = writer.run.setdefault("planned_stages", [])
        planned += [{"workload": s.workload, **s.load.as_dict(), "target": s.target.label, **self._pass(s)}
                    for s in slots]
        writer.run.setdefault("cut", None)
        self.durations = Durations()
        for d in writer.stages:  # refinement rounds: what earlier rounds measured
            wl = next(iter(d.get("workloads", {})), None)
            if wl and d.get("e2e", {}).get("p50") and not d.get("incomplete"):
                self.durations.add(d["target"], wl, stage_load(d), d["e2e"]["p50"] / 1000)
        self.sched = Schedule(slots, self.durations, plan.warmup_s, duration_s=plan.duration_s,
                              requests=plan.requests, adapt_window=plan.adapt_window, max_stage_s=plan.max_stage_s,
                              open=plan.open)
        self.index0 = len(writer.stages)
        self.t_start = time.monotonic()
        self.budget = RunBudget(self.sched, plan.max_run_s, self.t_start)
        self.stops: list[stops.Stop] = [Saturation(plan.climb_past_saturation), self.budget]
        self.last: tuple[float, float, float] | None = None
        """(when the last stage began, its typical estimate as planned, its load): what each stage took beyond its
        estimate (steadiness past the typical warm-up, the cool-down's slowest request, the fold, run.json written,
        server starts) is counted for the stages left. Without it a simulator run's 36 stages took 432 s, past the
        high end of the range printed at 9 of them."""

    def _head(self, i: int, slot) -> str:
        rep = f" pass {slot.repeat + 1}/{max(self.plan.repeat, self.plan.looks)}" if self._pass(slot) else ""
        return f"[{i + 1}/{len(self.slots)}] {slot.target.label} {slot.load.words()} " \
               f"workload={slot.workload}{rep}"

    def _pass(self, slot) -> dict:
        """The ``repeat`` key of a stage's dict (and its planned and not-run entries) in a repeated run; none
        for a refinement round's stage (run once, after the passes)."""
        if slot.repeat or (self.plan.repeat > 1 and slot.step < len(self.plan.ladder)):
            return {"repeat": slot.repeat}
        return {}

    def run(self) -> list[dict]:
        plan, n = self.plan, len(self.slots)
        self._first_up()
        log(f"{n} stages, estimated {self.sched.left(0, remaining_s=plan.max_run_s)}"
            + (" (request durations are not known before the first stage; a range once it has run)"
               if self.sched.bounds(0)[2] is None else "")
            + (f"; at most {fmt_s(plan.max_run_s)} (--max-run-time)" if plan.max_run_s else ""))
        i, failed = 0, False
        try:
            for i, slot in enumerate(self.slots):
                if not self._stage(i, slot):
                    break
        except LoadgenError as exc:  # e.g. a server that never became healthy: the stages before it are kept
            failed = True
            self.writer.run["cut"] = {"by": "error", "stages_not_run": n - i, "error": str(exc)}
            raise
        finally:
            for srv in self.running.values():
                srv.stop()
            self.writer.flush()
            took = fmt_s(time.monotonic() - self.t_start)
            # after an error, the line before the error's says what was measured, not "done"
            log(f"{len(self.done)} of {n} stages measured before the error ({took})" if failed
                else f"stages done in {took}")
        return self.done

    def _first_up(self) -> None:
        """The first stage's server, when loadgen starts it, up before the run says anything: a start command that
        exits at once (a typo, a missing model) is then one line, the error's, and nothing was measured. A start
        that took a while and then failed has said so (ManagedServer.start's announce): so does the run."""
        first = self.slots[0].target if self.slots else None
        if first is None or first.label not in self.plan.commands or self.writer.pending:
            return  # no server to start first, or a resumed run (its first stage may be kept)
        t0 = time.monotonic()
        try:
            self._up(first)
        except LoadgenError as exc:
            n = len(self.slots)
            self.writer.run["cut"] = {"by": "error", "stages_not_run": n, "error": str(exc)}
            self.writer.flush()
            if time.monotonic() - t0 >= ANNOUNCE_AFTER_S:
                log(f"0 of {n} stages measured before the error ({fmt_s(time.monotonic() - t0)})")
            raise

    def _stage(self, i: int, slot) -> bool:
        """Stage ``i`` run, kept from an interrupted run, or not run; False when the run stops here."""
        n = len(self.slots)
        kept = self.writer.take(slot.target.label, self.index0 + i, self.plan.load_of(slot.value))
        if kept is not None:  # --resume: measured before the run was interrupted
            log(f"{self._head(i, slot)}: kept from the interrupted run")
            self._measured(i, kept, slot)
            return True
        decision = stops.before(self.stops, i, slot)
        if decision.action == "stop":
            self._cut(n - i)
            return False
        if decision.action == "skip":
            log(f"{self._head(i, slot)}: not run, {decision.said}")
            self.writer.run.setdefault("not_run", []).append(
                {"target": slot.target.label, "workload": slot.workload, "value": slot.value,
                 "why": decision.why, **self._pass(slot)})
            return True
        if self._measure(i, slot, decision):
            self._cut(n - i - 1)
            return False
        return True

    def _cut(self, not_run: int) -> None:
        self.writer.run["cut"] = {"by": "max-run-time", "stages_not_run": not_run}
        log(f"--max-run-time reached: {not_run} planned stage(s) not run")

    def _up(self, target: Target) -> None:
        left = self.budget.left_s()
        _ensure_up(self.plan, target, self.running, self.servers, None if left is None else max(1.0, left))

    def _measure(self, i: int, slot, decision) -> bool:
        """Stage ``i`` measured and written; True when the run ends after it."""
        plan, sched, target, wl = self.plan, self.sched, slot.target, slot.workload
        left_s = self.budget.left_s()
        self._up(target)
        if wl not in self.sources:
            self.sources[wl] = plan.make_source(wl)
        spec = sched.spec(i, decision.budget, decision.by)
        now = time.monotonic()
        if self.last is not None:
            sched.overruns.append((self.last[2], now - self.last[0] - self.last[1]))
        self.last = (now, spec.estimate_s(), slot.value)
        skipped = self.budget.skipped(i)
        log(f"{self._head(i, slot)} (elapsed {fmt_s(now - self.t_start)}, {sched.left(i, spec, left_s, skipped)} left)")
        after_s = sched.after(i, self.budget.skipped(i + 1),
                              None if left_s is None else left_s - (spec.max_stage_s or 0.0))
        res, retried = self._run_retrying(i, slot, spec, after_s)
        extra = {"retried": retried} if retried is not None else {}
        return self._measured(i, self.writer.add_stage(res, **extra, **self._pass(slot)), slot)

    def _run_retrying(self, i: int, slot, spec, after_s):
        """The stage's result, run a second time (once) when a server loadgen started died during it."""
        target, retried = slot.target, None
        while True:
            reset = cache_reset(target, self.servers.get(target.label)) if self.plan.reset_cache else None
            srv = self.running.get(target.label)
            # the first try is cut as soon as a server loadgen started exits (the retry runs to its end)
            watch = ServerExit(srv) if srv is not None and retried is None else None
            clock0 = simclock.read(target.url, self.servers.get(target.label), target.headers)
            res = self._try(i, slot, spec, after_s, watch)
            died = _died(self.running.get(target.label), target.label)
            if died is None or retried is not None:
                break
            req = res.to_dict()["requests"] if res is not None else {"completed": 0, "failed": 0}
            retried = {"why": f"{died} during the stage", "first_try": {k: req[k] for k in ("completed", "failed")}}
            cut = "; the stage cut where it was" if watch is not None and watch.exited.is_set() else ""
            log(f"    {died} during the stage ({req['completed']} ok, {req['failed']} failed{cut}): starting it "
                "again and running the stage once more")
            self._up(target)
        if died is not None:  # once only: the stage is kept as measured, its failures counted
            res.notes.append(f"the retried stage saw the server exit again: {died}")
            log(f"    {died} again: the retried stage is kept as measured")
        _annotate(res, target, self.servers.get(target.label), clock0, reset, retried)
        return res, retried

    def _try(self, i: int, slot, spec, after_s, watch):
        plan, target = self.plan, slot.target
        line = ProgressLine(f"{target.label} {slot.load.words()}", after_s=after_s)
        probe = (plan.window_probe(target) if plan.window_probe is not None
                 else watch_for(target, self.servers.get(target.label), plan.server_metrics_interval))
        try:
            return run_stage_processes(target, spec, self.sources[slot.workload], plan.opts,
                                       processes=plan.processes, stage_index=self.index0 + i, loop_kind=plan.loop,
                                       progress=line, window_probe=probe, seed_index=prompt_seed(slot.step, slot.repeat),
                                       stop=None if watch is None else watch.exited)
        except Interrupted as exc:
            if watch is None or not watch.exited.is_set():  # Ctrl-C or SIGTERM
                if exc.partial is not None:
                    self.writer.add_stage(exc.partial)  # kept, marked incomplete; analyses skip it
                self.writer.run["cut"] = {"by": "interrupt", "stages_not_run": len(self.slots) - i - 1}
                raise
            return exc.partial  # cut where the server exited: only what it counted is told
        finally:
            if watch is not None:
                watch.close()
            line.done()

    def _measured(self, i: int, d: dict, slot) -> bool:
        """A stage's summary lines, and what later stages learn from it (durations, saturation); True when a
        stop ends the run after it."""
        d_req = d["requests"]
        log(f"    {d_req['completed']} ok, {d_req['failed']} failed"
            + (f", {d_req['cancelled']} cancelled" if d_req.get("cancelled") else "")
            + f", {d['output_tokens_per_s']:.1f} tok/s, "
            f"TTFT p50 {d['ttft'].get('p50', float('nan')):.1f} ms"
            + (" [client-bound]" if d["client"]["client_bound"] else "")
            + (f" [cut in the {d['cut']['phase']}: {d['cut']['by']}]" if d.get("cut") else ""))
        end, said = stops.after(self.stops, i, slot, d)
        for line in said:
            log(f"    {line}")
        for note in d["notes"]:
            log(f"    note: {note}")
        self.done.append(d)
        if d["e2e"].get("p50") and not d.get("incomplete"):
            self.durations.add(d["target"], slot.workload, slot.value, d["e2e"]["p50"] / 1000)
        return end


def _annotate(res, target: Target, probed: dict | None, clock0, reset: dict | None, retried: dict | None) -> None:
    """The stage's simulator clock and true speculation switches, cache reset and retry, with their notes."""
    if res is not None and clock0 is not None:
        res.simulator = simclock.over(clock0, simclock.read(target.url, probed, target.headers))
        if res.simulator is not None and res.simulator["starved"]:
            res.notes.append(simclock.note(res.simulator))
        if res.simulator is not None:
            true = simclock.switches(target.url, probed, res.window_start_ns, res.window_end_ns, target.headers)
            if true is not None:
                res.simulator["switching"] = true.to_dict()
    if reset is not None:
        res.cache_reset = reset
        if not reset["ok"]:
            res.notes.append(f"cache not reset before the stage: {reset.get('error')}")
    if retried is not None:
        res.notes.append(f"run twice: {retried['why']}; the server was started again")


def watch_for(target: Target, probed: dict | None, interval_s: float) -> ServerWatch:
    """The default window probe: the target's /metrics, with the running cap its probe found."""
    return ServerWatch(target.url, interval_s, headers=target.headers, max_running=running_cap(probed))


def cache_reset(target: Target, probed: dict | None) -> dict:
    """Empty the target's prefix cache now (--reset-cache), the way the engine its /metrics names is
    emptied (the simulator in its vLLM flavour answers vLLM's route), else the probe's engine."""
    engine = fetch(target.url, headers=target.headers).engine
    if engine == "unknown":
        engine = (probed or {}).get("engine", "unknown")
    rec = reset_cache(target.url, engine, headers=target.headers)
    log(f"    cache reset ({rec.get('how') or engine}): " + ("done" if rec["ok"] else rec.get("error", "failed")))
    return rec


RESTARTS = 2
"""A server that exits on its own is started again at most this many times in a row."""
RESTART_BACKOFF_S = (1.0, 4.0)
"""The wait before each of those starts."""


class ServerExit:
    """Watches a server loadgen started while a stage runs: ``exited`` is set once it has ended on its own
    (the stage is then cut where it is, not run to its end against nothing)."""

    def __init__(self, srv: ManagedServer, every_s: float = 0.2) -> None:
        self.srv = srv
        self.exited = threading.Event()
        self._done = threading.Event()
        threading.Thread(target=self._watch, args=(every_s,), daemon=True, name="server-exit").start()

    def _watch(self, every_s: float) -> None:
        while not self._done.wait(every_s):
            if self.srv.exited() is not None:
                self.exited.set()
                return

    def close(self) -> None:
        self._done.set()


def _died(srv: ManagedServer | None, label: str) -> str | None:
    """How a server loadgen started has ended on its own, in words; None: it runs (or loadgen does not start it)."""
    code = srv.exited() if srv is not None else None
    return None if code is None else f"{label}'s server exited (status {code})"


def _ensure_up(plan: RampPlan, target: Target, running: dict, servers: dict, within_s: float | None = None) -> None:
    """Start the target's server if loadgen starts it (stopping the other: one at a time), and probe it.

    A server of this target that has exited since is started again, up to :data:`RESTARTS` times with
    backoff; one that does not come back is a LoadgenError (the stages measured before are kept).
    ``within_s``: what is left of the run's budget; a server's start may take no longer."""
    cmd = plan.commands.get(target.label)
    if cmd is not None and within_s is not None and within_s < cmd.startup_timeout_s:
        cmd = dataclasses.replace(cmd, startup_timeout_s=within_s)
    restart = None
    if cmd is not None and target.label in running and (restart := _died(running[target.label], target.label)):
        running.pop(target.label).stop()  # its log closed, anything it left on the port killed
    if cmd is not None and target.label not in running:
        for label, srv in list(running.items()):  # one GPU box: one server at a time
            log(f"stopping {label}")
            srv.stop()
            del running[label]
        if restart is None:
            srv = ManagedServer(cmd)
            # said once the start takes a while: a command that exits at once is the error's one line alone
            srv.start(announce=lambda: log(f"starting {target.label}: waiting for {cmd.health_url}"))
        else:
            srv = _restart(cmd, restart)
        running[target.label] = srv
    if target.label not in servers:
        servers[target.label] = probe_target(target, cmd.command if cmd is not None else None).to_dict()


def _restart(cmd: ServerCommand, why: str) -> ManagedServer:
    """Start a server that exited again: :data:`RESTARTS` attempts after :data:`RESTART_BACKOFF_S` waits."""
    last = ""
    for attempt, wait in enumerate(RESTART_BACKOFF_S[:RESTARTS], 1):
        log(f"{why}: starting it again in {wait:g} s (attempt {attempt} of {RESTARTS}), waiting for {cmd.health_url}")
        time.sleep(wait)
        srv = ManagedServer(cmd)
        try:
            srv.start()
            return srv
        except LoadgenError as exc:
            last = str(exc)
    raise LoadgenError(f"{why} and did not come back after {RESTARTS} restarts; the run stops here, what it "
                       f"measured is kept (last attempt: {last})")
