"""Where a stage sits on its ladder, said as what it is: a concurrency, a request rate or a trace's speed.

In: a ladder value and its axis; a run.json ``planned_stages`` entry. Out: :class:`LoadPoint` — its words
("C=10", "rate=2.5/s", "trace x2") and its run.json key (``{"rate": 2.5}``) — and :func:`planned_value`,
which reads an entry written under any axis's key (files written before the axis was named carry every
ladder value under ``"concurrency"``, a rate of 6.48 req/s included).
"""

from __future__ import annotations

from dataclasses import dataclass

AXES = ("concurrency", "rate", "trace_speed")


@dataclass(frozen=True)
class LoadPoint:
    axis: str
    """"concurrency" (closed loop), "rate" (req/s, open loop) or "trace_speed" (a trace replayed x times faster)."""
    value: float

    def __post_init__(self) -> None:
        if self.axis not in AXES:
            raise ValueError(f"load axis {self.axis!r} is not one of {', '.join(AXES)}")

    def words(self) -> str:
        if self.axis == "concurrency":
            return f"C={self.value}"
        if self.axis == "trace_speed":
            return f"trace x{self.value:g}"
        return f"rate={self.value:.3g}/s"

    def as_dict(self) -> dict:
        return {self.axis: self.value}


def planned_value(entry: dict) -> float | None:
    """The ladder value of a ``planned_stages`` entry, whatever its axis's key; None: it names none."""
    return next((entry[a] for a in AXES if a in entry), None)
