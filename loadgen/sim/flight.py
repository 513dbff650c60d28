"""A request in flight on the simulated server: the type the server and its routes share.

In: a validated job and its scheduler request. Out: nothing; it is the state the handlers
read (what was planned, what the client has been sent) until the request is retired.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.sim.requestplan import Finish
from loadgen.sim.scheduler import SimRequest
from loadgen.sim.textgen import OutputView
from loadgen.sim.validate import Job


@dataclass(eq=False, slots=True)
class Flight:
    """A request in flight: its scheduler half, what the client sees, and who finishes last."""

    job: Job
    req: SimRequest
    out: OutputView
    finish: Finish
    created: int
    handler_done: bool = False
    last_emit_ns: int = 0
    first_emit_ns: int = 0
    fault: str = ""
    """A fault still to apply to this response (loadgen.sim.faults); '' once applied, or none."""
