"""Phase-shifting workloads: one workload after another on a clock, the same schedule for every target.

In: a spec ``phases:NAME@DUR,NAME@DUR[,...]`` (each NAME any spec :func:`loadgen.workloads.resolve` takes
but another ``phases:``, a weighted mix included; DUR ``30s``, ``2m``, ``500ms`` or plain seconds; the list
repeats). Out: :func:`parse` → a :class:`PhaseSchedule` (or a one-line :class:`LoadgenError` naming the spec),
and :class:`PhaseWorkload`, whose :meth:`~PhaseWorkload.requests` is a :class:`PhaseStream`: each request is
drawn from the workload of the phase its send instant falls in, labelled with that phase's NAME (so a stage's
per-workload slices are per-phase slices) and ``phase`` = the phase's index in the list.

The clock starts at an anchor the stage sets when its steady window opens (:meth:`PhaseStream.anchor`; several
processes share that instant), so every target's window runs the same schedule whatever its warm-up lasted;
before it, phase 0. A closed loop's request takes the phase at the instant its user draws it (just before the
send: the same loop iteration, no await between); an open loop's the phase at its planned instant
(:meth:`PhaseStream.at`, loadgen/run/pacing.py), so a late send does not move it.

Each distinct NAME has one request stream seeded exactly as that workload alone would be (``requests(seed)``),
continued through every phase that names it: a phase of ``predictable`` sends the prompts ``--workload
predictable`` sends, every target the same ones in the same order, and the simulator's own answer for that
phase (loadgen.sim.known, which resolves the label) plans those very requests.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from loadgen.errors import LoadgenError
from loadgen.request import GenRequest
from loadgen.workloads.base import Workload

PREFIX = "phases:"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True)
class Phase:
    name: str
    """The phase's workload spec as written: the label its requests carry."""
    duration_s: float


@dataclass(frozen=True)
class PhaseSchedule:
    """The phases in order; the list repeats for as long as the stage runs."""

    spec: str
    phases: tuple[Phase, ...]

    @property
    def cycle_s(self) -> float:
        return math.fsum(p.duration_s for p in self.phases)

    @property
    def names(self) -> list[str]:
        """Each distinct phase workload once, in order of first appearance."""
        return list(dict.fromkeys(p.name for p in self.phases))

    def index_at(self, since_s: float) -> int:
        """The phase running ``since_s`` seconds after the anchor (phase 0 before it)."""
        if since_s <= 0:
            return 0
        t = math.fmod(since_s, self.cycle_s)
        for i, p in enumerate(self.phases):
            if t < p.duration_s:
                return i
            t -= p.duration_s
        return len(self.phases) - 1  # float rounding at the cycle's very end

    def intervals(self, span_s: float) -> list[tuple[float, float, int]]:
        """(start s, end s, phase index) of every phase that begins in [0, span_s) after the anchor."""
        out, t, i = [], 0.0, 0
        while t < span_s:
            d = self.phases[i % len(self.phases)].duration_s
            out.append((t, t + d, i % len(self.phases)))
            t += d
            i += 1
        return out


def _duration(text: str, spec: str, item: str) -> float:
    m = _DURATION.match(text)
    if m is None:
        raise LoadgenError(f"workload {spec!r}: phase {item!r}: {text!r} is not a duration (30s, 2m, 500ms)")
    value = float(m.group(1)) * _UNIT_S[m.group(2)]
    if value <= 0:
        raise LoadgenError(f"workload {spec!r}: phase {item!r} has zero length")
    return value


def parse(spec: str) -> PhaseSchedule:
    """The schedule a ``phases:`` spec names (its workload names are not looked up here: the registry does)."""
    body = spec.strip()[len(PREFIX):] if spec.strip().startswith(PREFIX) else spec.strip()
    if not body.strip():
        raise LoadgenError(f"workload {spec!r}: no phases (phases:NAME@DUR,NAME@DUR, e.g. phases:chat@30s,code@30s)")
    phases: list[Phase] = []
    pending: list[str] = []
    # a phase's NAME may be a weighted mix (chat:1,code:1@30s): its commas run until the piece with @DUR
    for piece in body.split(","):
        pending.append(piece)
        if "@" not in piece:
            continue
        item = ",".join(pending).strip()
        pending = []
        name, _, dur = item.rpartition("@")
        name = name.strip()
        if not name:
            raise LoadgenError(f"workload {spec!r}: phase {item!r} names no workload")
        if name.startswith(PREFIX):
            raise LoadgenError(f"workload {spec!r}: a phase cannot be another phases: workload ({name!r})")
        phases.append(Phase(name, _duration(dur, spec, item)))
    if pending:
        rest = ",".join(pending).strip()
        raise LoadgenError(f"workload {spec!r}: phase {rest!r} has no duration (NAME@DUR, e.g. {rest or 'chat'}@30s)")
    return PhaseSchedule(spec.strip(), tuple(phases))


class PhaseStream(Iterator[GenRequest]):
    """Requests, each from the workload of the phase its instant falls in (see the module doc).

    ``clock``: perf_counter ns, the instant a closed loop's user draws its next request.
    """

    def __init__(self, schedule: PhaseSchedule, streams: dict[str, Iterator[GenRequest]],
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.schedule, self.streams, self.clock = schedule, streams, clock
        self.anchor_ns: int | None = None

    def anchor(self, t_ns: int) -> None:
        """Start the schedule's clock at ``t_ns`` (the stage's window opening, perf_counter ns)."""
        self.anchor_ns = t_ns

    def index_at(self, t_ns: int) -> int:
        return 0 if self.anchor_ns is None else self.schedule.index_at((t_ns - self.anchor_ns) / 1e9)

    def at(self, t_ns: int) -> GenRequest:
        """The next request of the phase running at ``t_ns``."""
        i = self.index_at(t_ns)
        name = self.schedule.phases[i].name
        return replace(next(self.streams[name]), workload=name, phase=i)

    def __next__(self) -> GenRequest:
        return self.at(self.clock())


class PhaseWorkload(Workload):
    """Workloads one after another on a clock (the module doc); ``parts``: each distinct phase name's workload."""

    def __init__(self, schedule: PhaseSchedule, parts: dict[str, Workload]) -> None:
        self.schedule = schedule
        self.parts = parts
        self.name = schedule.spec
        self.description = "phases: " + ", ".join(f"{p.name} for {p.duration_s:g} s" for p in schedule.phases)

    def requests(self, seed: int) -> PhaseStream:
        return PhaseStream(self.schedule, {name: w.requests(seed) for name, w in self.parts.items()})


def schedules(specs: Sequence[str]) -> list[PhaseSchedule]:
    """The schedules among a run's workload specs (``run.workloads``), malformed ones left out."""
    out = []
    for s in specs:
        if isinstance(s, str) and s.strip().startswith(PREFIX):
            try:
                out.append(parse(s))
            except LoadgenError:
                pass
    return out
