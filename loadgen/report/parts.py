"""The parts of a workload's section that read only its stages, whatever the run's axis.

In: the run.json stage dicts of one workload (every target, in ladder order) and the adaptive configurations'
labels. Out: each part's heading and HTML, "" for a part whose data no stage has: the speculation timeline
(a stage with per-second acceptance or a switching flag), the per-turn table (stages that held sessions).
Both the concurrency section (report/sections.py) and the open loop's (report/rates.py) place
:func:`stage_parts`; a part that reads only stages is one entry of :data:`STAGE_PARTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Callable

from loadgen.report.sessions import session_table
from loadgen.report.speculation import timeline_part

__all__ = ["Part", "STAGE_PARTS", "stage_parts"]


@dataclass
class Part:
    """A heading and what it heads; :meth:`html` is "" when there is nothing under the heading."""

    heading: str
    body: str
    level: int = 3

    def has_data(self) -> bool:
        return bool(self.body.strip())

    def html(self) -> str:
        if not self.has_data():
            return ""
        return f"<h{self.level}>{escape(self.heading)}</h{self.level}>{self.body}"


STAGE_PARTS: list[tuple[str, Callable[[list[dict], list[str]], str]]] = [
    ("What speculation did, second by second", lambda stages, adaptive: timeline_part(stages, list(adaptive))),
    ("Multi-turn sessions, turn by turn", lambda stages, adaptive: session_table(stages)),
]


def stage_parts(stages: list[dict], adaptive: list[str]) -> str:
    """Every part of :data:`STAGE_PARTS` that has data, in order."""
    return "".join(Part(heading, body(stages, adaptive)).html() for heading, body in STAGE_PARTS)
