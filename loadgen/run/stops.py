"""What keeps a planned stage from running, as objects the ramp consults before and after each stage.

In: the run's stage order (``Slot``s), its :class:`Schedule` and budget, and each measured stage's dict.
Out: before a stage a :class:`Decision` — run it (with its share of the budget), skip it (not run, with
why: written to ``run["not_run"]``), or stop the run there (``run["cut"]``) — and after it whether the run
must stop, with the lines the stops have about the stage. One object per reason, one protocol
(:class:`Stop`), consulted as a list by :func:`before` and :func:`after`, as guidellm's scheduler
constraints are (scheduler/constraints/); the scripted ramp (run/ramp.py) and the Locust ramp
(locust/conductor.py) ask the same objects:

- :class:`Saturation`: an open-loop target that saturated at a rate runs no higher rate (unless
  ``--past-saturation``);
- :class:`RunBudget`: ``--max-run-time`` shared out between the stages left; a load whose share cannot buy
  a steady window is not run for any configuration; the run ends when the budget is spent;
- :class:`Deadline`: ``--max-run-time`` for stages of a fixed length (the Locust ramp, whose workers run one
  plan per stage: a window cannot take a share): a stage starts only if it ends within the budget, and the
  run ends at the first that would not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

from loadgen.run.order import Schedule, Slot
from loadgen.stage.load import LoadPoint
from loadgen.stage.saturation import saturation


@dataclass(frozen=True)
class Decision:
    """``action``: "run", "skip" or "stop". A skip says ``said`` in the log and ``why`` in ``run.not_run``;
    a run carries its share of the budget (seconds or None, and what bounds it)."""

    action: str
    why: str = ""
    said: str = ""
    budget: float | None = None
    by: str = ""


RUN = Decision("run")


class Stop(Protocol):
    """One reason a planned stage is not run or the run ends: asked before stage ``i``, told what it measured."""

    def before(self, i: int, slot: Slot) -> Decision: ...

    def after(self, i: int, slot: Slot, d: dict) -> Decision:
        """"stop" to end the run after stage ``i``; ``said``: a line about the stage (else "")."""


def before(stops: list[Stop], i: int, slot: Slot) -> Decision:
    """The first stop's decision that is not "run"; else "run", with the tightest budget any of them gave."""
    run = RUN
    for stop in stops:
        d = stop.before(i, slot)
        if d.action != "run":
            return d
        if d.budget is not None and (run.budget is None or d.budget < run.budget):
            run = d
    return run


def after(stops: list[Stop], i: int, slot: Slot, d: dict) -> tuple[bool, list[str]]:
    """Whether the run ends after stage ``i``, and each stop's line about it."""
    told = [stop.after(i, slot, d) for stop in stops]
    return any(x.action == "stop" for x in told), [x.said for x in told if x.said]


class Saturation:
    """Open loop: (target, workload) → the load where it saturated and why; higher loads are not run."""

    def __init__(self, climb: bool) -> None:
        self.climb = climb
        self.at: dict[tuple[str, str], tuple[LoadPoint, str]] = {}

    def before(self, i: int, slot: Slot) -> Decision:
        sat = self.at.get((slot.target.label, slot.workload))
        if sat is None or slot.value <= sat[0].value or self.climb:
            return RUN
        return Decision("skip", why=f"saturated at {sat[0].value:g}",
                        said=f"the server saturated at {sat[0].words()} ({sat[1]})")

    def after(self, i: int, slot: Slot, d: dict) -> Decision:
        """Learn from an open-loop stage; its line (offered, ended, dispatch lag, SATURATED)."""
        if not d.get("open_loop"):
            return RUN
        ol = d["open_loop"]
        lag = (ol.get("dispatch_lag_ms") or {}).get("p99")
        verdict = saturation(d)
        if verdict.saturated:
            self.at.setdefault((slot.target.label, slot.workload), (slot.load, verdict.why))
        return Decision("run", said=f"offered {ol.get('rate', slot.value):.3g} req/s, ended "
                        f"{verdict.ended_per_s or 0:.3g} req/s in the window; dispatch lag p99 "
                        f"{lag if lag is not None else float('nan'):.2f} ms"
                        + (f"; SATURATED: {verdict.why}" if verdict.saturated else ""))


class RunBudget:
    """``--max-run-time``: each stage's share of what is left (``Schedule.budget``), loads it cannot buy a
    steady window at (not compared anyway, analysis.coverage: their share buys the other stages' time), and
    the run's end. Without a budget every stage runs."""

    def __init__(self, sched: Schedule, max_run_s: float | None, t_start: float) -> None:
        self.sched = sched
        self.deadline = t_start + max_run_s if max_run_s else None
        self.unaffordable: dict[tuple[str, float], str] = {}
        """(workload, value) → why the run's budget cannot buy a steady window there: not run for any target."""

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def skipped(self, i: int) -> frozenset[int]:
        slots = self.sched.slots
        return frozenset(j for j in range(i, len(slots))
                         if (slots[j].workload, slots[j].value) in self.unaffordable)

    def before(self, i: int, slot: Slot) -> Decision:
        key = (slot.workload, slot.value)
        why = self.unaffordable.get(key, "")
        if not why:
            given = self.sched.budget(i, self.left_s(), self.skipped(i))
            if given is None:
                return Decision("stop")
            budget, by = given
            why = self.sched.unaffordable(i, budget, by)
            if not why:
                return Decision("run", budget=budget, by=by)
        self.unaffordable[key] = why
        return Decision("skip", why=why, said=why)

    def after(self, i: int, slot: Slot, d: dict) -> Decision:
        """The run's end has come (only the run's end stops it: a stage that spent its share is cut and the
        ladder goes on)."""
        end = (self.deadline is not None and time.monotonic() >= self.deadline - self.sched.least_s()
               and i + 1 < len(self.sched.slots))
        return Decision("stop") if end else RUN


class Deadline:
    """``--max-run-time`` over stages whose length is fixed by their plan (``length_s(i)``: seconds, 0 when it
    is a request count's): a stage starts when it ends within what is left, and none after one that would not."""

    def __init__(self, max_run_s: float | None, t_start: float, length_s: Callable[[int], float], n: int) -> None:
        self.deadline = t_start + max_run_s if max_run_s else None
        self.length_s = length_s
        self.n = n

    def before(self, i: int, slot: Slot) -> Decision:
        if self.deadline is None:
            return RUN
        left = self.deadline - time.monotonic()
        return RUN if left > 0 and self.length_s(i) <= left else Decision("stop")

    def after(self, i: int, slot: Slot, d: dict) -> Decision:
        over = self.deadline is not None and time.monotonic() >= self.deadline and i + 1 < self.n
        return Decision("stop") if over else RUN
