"""Arrival processes: a rate and a burstiness in, planned send offsets (seconds) out.

``constant`` sends every 1/rate s. ``poisson`` draws exponential gaps (coefficient of
variation 1). ``gamma:CV`` draws gamma gaps of mean 1/rate and coefficient of variation CV
(shape 1/CV²): CV > 1 is burstier than Poisson, CV < 1 smoother; ``gamma:1`` is Poisson.
vLLM's ``--burstiness B`` is the shape, so ``gamma:CV`` = ``--burstiness 1/CV²``.

The sequence is a function of (seed, rate, process) alone, drawn from its own
``random.Random`` keyed by a string, so every target at a rate gets the same
schedule, across runs and processes, and the simulator's truth replays the
very one the client sent.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator

from loadgen.errors import LoadgenError

KINDS = ("constant", "poisson", "gamma")


@dataclass(frozen=True)
class Arrivals:
    """An arrival process at ``rate`` requests per second."""

    rate: float
    kind: str = "poisson"
    cv: float = 1.0
    """Coefficient of variation of the gaps (gamma only; 0 for constant, 1 for Poisson)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise LoadgenError(f"--rate: a rate must be > 0 requests/s, got {self.rate:g}")
        if self.kind not in KINDS:
            raise LoadgenError(f"--arrival: unknown arrival process {self.kind!r}; known: constant, poisson, gamma:CV")
        if self.kind == "gamma" and not (math.isfinite(self.cv) and self.cv > 0):
            raise LoadgenError(f"--arrival gamma:CV: CV must be > 0, got {self.cv:g}")

    @property
    def name(self) -> str:
        return f"gamma:{self.cv:g}" if self.kind == "gamma" else self.kind

    def gaps(self, seed: int) -> Iterator[float]:
        """Endless gaps (seconds) between planned sends, the first one included (from the stage's start)."""
        mean = 1.0 / self.rate
        if self.kind == "constant":
            while True:
                yield mean
        # keyed by the rate as a float: arrivals(8) and arrivals(8.0) are one schedule
        rng = random.Random(f"loadgen.arrivals:{seed}:{float(self.rate)!r}:{self.name}")
        if self.kind == "poisson" or (self.kind == "gamma" and self.cv == 1.0):
            while True:
                yield rng.expovariate(self.rate)
        shape = 1.0 / (self.cv * self.cv)
        scale = mean / shape
        while True:
            yield rng.gammavariate(shape, scale)

    def times(self, seed: int, start_s: float = 0.0) -> Iterator[float]:
        """Endless ascending planned offsets (seconds from the stage's start)."""
        t = start_s
        for g in self.gaps(seed):
            t += g
            yield t

    def until(self, seed: int, end_s: float) -> list[float]:
        """The planned offsets before ``end_s``."""
        out = []
        for t in self.times(seed):
            if t >= end_s:
                return out
            out.append(t)
        return out  # pragma: no cover - the sequence is endless


@dataclass(frozen=True)
class Replay:
    """A trace's send times (loadgen.timing.trace), replayed ``speed`` times faster: a finite schedule."""

    offsets_s: tuple[float, ...]
    speed: float = 1.0

    @property
    def rate(self) -> float:
        """The replay's mean rate (req/s): requests over the span of their send times."""
        span = (self.offsets_s[-1] - self.offsets_s[0]) if len(self.offsets_s) > 1 else 0.0
        return (len(self.offsets_s) - 1) / span if span > 0 else float(len(self.offsets_s))

    @property
    def name(self) -> str:
        return f"trace x{self.speed:g}"

    def times(self, seed: int) -> Iterator[float]:
        return iter(self.offsets_s)


def parse_arrival(text: str | None, flag: str = "--arrival") -> tuple[str, float]:
    """``poisson`` | ``constant`` | ``gamma:CV`` → (kind, cv); one line naming ``flag`` otherwise."""
    t = (text or "poisson").strip().lower()
    kind, sep, rest = t.partition(":")
    if kind == "poisson" and not sep:
        return "poisson", 1.0
    if kind == "constant" and not sep:
        return "constant", 0.0
    if kind == "gamma":
        try:
            cv = float(rest)
        except ValueError:
            cv = float("nan")
        if sep and math.isfinite(cv) and cv > 0:
            return "gamma", cv
        raise LoadgenError(f"{flag} {text!r}: gamma needs a burstiness, the gaps' coefficient of variation > 0 "
                           "(gamma:2 is burstier than Poisson, gamma:0.5 smoother)")
    raise LoadgenError(f"{flag} {text!r}: expected poisson, constant or gamma:CV")


def arrivals(rate: float, text: str | None = "poisson") -> Arrivals:
    kind, cv = parse_arrival(text)
    return Arrivals(rate, kind, cv)
