"""Faults the simulator injects on purpose (``loadgen sim --faults SPEC``, docs/simulator.md "Faults").

In: a spec such as ``reset=0.02,http503=0.01,stall=0.01:30s,die_after=500`` and the simulator's seed.
Out: :class:`FaultSpec` (the parsed spec; a malformed one is a one-line :class:`LoadgenError`
naming the bad part) and :class:`FaultPlan`, which gives each generation request its fault: one
seeded uniform draw per request, so the same request sequence gets the same faults.

The routes apply them (``loadgen.sim.routes``) and the truth records which request got which
(``TruthRecord.fault``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from loadgen.errors import LoadgenError

HTTP_STATUS = {"http503": 503, "http500": 500, "http429": 429}
"""That status with an SGLang/OpenAI-shaped JSON error body, before any stream."""
MIDSTREAM = ("reset", "error_event", "malformed", "stall", "truncate")
"""Applied after the first event that carries tokens (or before the last event, when that is the first)."""
TIMED = ("stall", "slow_headers")
"""Kinds that take a duration: ``stall=P:D``, ``slow_headers=P:D``."""
KINDS = ("reset", *HTTP_STATUS, "error_event", "malformed", "stall", "slow_headers", "truncate")
"""Per-request kinds, in the order their probabilities are stacked on the one uniform draw."""
STREAM_ONLY = ("error_event", "malformed", "stall", "truncate")
"""What only a streamed response can carry: a non-streamed request drawn one of these gets none."""
PROCESS = ("die_after", "hang_after")
HANG = "hang"
DIE = "die"
EARLY = (*HTTP_STATUS, HANG)
"""Faults answered before a request is scheduled."""
"""Truth's fault for a request received after hang_after, and for one in flight when die_after fired."""

_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ms|s|m)?$")


def _duration(part: str, text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise LoadgenError(f"--faults: {part!r}: bad duration {text!r} (e.g. 30s, 500ms)")
    value = float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    if value <= 0:
        raise LoadgenError(f"--faults: {part!r}: the duration must be > 0")
    return value


@dataclass(frozen=True)
class FaultSpec:
    probs: tuple[tuple[str, float], ...] = ()
    """(kind, per-request probability), in KINDS order, only those asked for."""
    durations: tuple[tuple[str, float], ...] = ()
    """(kind, seconds) of stall and slow_headers: wall seconds, not scaled by --time-scale."""
    die_after: int | None = None
    """The process exits once this many generation requests have been answered."""
    hang_after: int | None = None
    """Every generation request after this many is accepted and never answered."""
    text: str = ""

    def duration(self, kind: str) -> float:
        return dict(self.durations).get(kind, 0.0)

    def to_dict(self) -> dict:
        return {"spec": self.text, "probabilities": dict(self.probs), "durations_s": dict(self.durations),
                "die_after": self.die_after, "hang_after": self.hang_after}


def parse(text: str) -> FaultSpec:
    """``kind=P[,kind=P:D]...[,die_after=N][,hang_after=N]``; a one-line LoadgenError naming the bad part."""
    probs: dict[str, float] = {}
    durations: dict[str, float] = {}
    process: dict[str, int] = {}
    if not text.strip():
        raise LoadgenError("--faults: empty spec (e.g. reset=0.02,http503=0.01,stall=0.01:30s)")
    for part in text.split(","):
        part = part.strip()
        name, eq, value = part.partition("=")
        name = name.strip()
        if not part or not eq or not value.strip():
            raise LoadgenError(f"--faults: {part!r}: expected kind=probability (known: {', '.join(KINDS + PROCESS)})")
        if name in probs or name in process:
            raise LoadgenError(f"--faults: {part!r}: {name} given twice")
        if name in PROCESS:
            try:
                n = int(value)
            except ValueError:
                n = -1
            if n < 1:
                raise LoadgenError(f"--faults: {part!r}: {name} takes a whole number of requests >= 1")
            process[name] = n
            continue
        if name not in KINDS:
            raise LoadgenError(f"--faults: {part!r}: unknown fault {name!r} (known: {', '.join(KINDS + PROCESS)})")
        p_text, colon, d_text = value.partition(":")
        if name in TIMED:
            if not colon:
                raise LoadgenError(f"--faults: {part!r}: {name} takes probability:duration, e.g. {name}=0.01:5s")
            durations[name] = _duration(part, d_text)
        elif colon:
            raise LoadgenError(f"--faults: {part!r}: {name} takes no duration")
        try:
            p = float(p_text)
        except ValueError:
            raise LoadgenError(f"--faults: {part!r}: probability {p_text!r} is not a number") from None
        if not 0.0 <= p <= 1.0:
            raise LoadgenError(f"--faults: {part!r}: probability must be in [0, 1]")
        probs[name] = p
    total = sum(probs.values())
    if total > 1.0 + 1e-9:
        raise LoadgenError(f"--faults: {text!r}: the probabilities add up to {total:g} > 1")
    return FaultSpec(
        probs=tuple((k, probs[k]) for k in KINDS if k in probs),
        durations=tuple((k, durations[k]) for k in TIMED if k in durations),
        die_after=process.get("die_after"),
        hang_after=process.get("hang_after"),
        text=text.strip(),
    )


class FaultPlan:
    """Each generation request's fault: one uniform draw per request from a generator seeded by the seed."""

    def __init__(self, spec: FaultSpec, seed: int = 0) -> None:
        self.spec = spec
        self._rng = random.Random(f"loadgen-sim-faults:{seed}")
        self._cum: list[tuple[float, str]] = []
        acc = 0.0
        for kind, p in spec.probs:
            acc += p
            self._cum.append((acc, kind))
        self.received = 0
        """Generation requests drawn for so far."""
        self.answered = 0
        """Generation requests whose handler has ended (die_after counts these)."""
        self.injected: dict[str, int] = {}
        self.dying = False

    def draw(self, stream: bool) -> str:
        """The next request's fault: a kind, ``hang``, or '' for none."""
        self.received += 1
        u = self._rng.random()  # always one draw: the n-th request's fault does not depend on the others'
        kind = ""
        if self.spec.hang_after is not None and self.received > self.spec.hang_after:
            kind = HANG
        else:
            for edge, k in self._cum:
                if u < edge:
                    kind = k
                    break
            if kind in STREAM_ONLY and not stream:
                kind = ""
        if kind:
            self.injected[kind] = self.injected.get(kind, 0) + 1
        return kind

    def answer(self) -> bool:
        """One generation request answered; True when die_after says the process must now exit."""
        self.answered += 1
        if self.spec.die_after is not None and self.answered >= self.spec.die_after and not self.dying:
            self.dying = True
            return True
        return False
