"""The stage runner: a target at a fixed concurrency for a while, as a StageResult.

In: a target, a :class:`StageSpec`, a request source, :class:`RunOptions`.
Out: the stage's :class:`StageResult`. This module is the runner's one name for
callers (``loadgen run``/``crossover``, the benchmarks, the Locust stage); the
code lives along its seams:

- ``spec``: what a stage is asked to do (StageSpec, RunOptions, Cut, WindowProbe, Interrupted);
- ``window``: the window's bookkeeping (StageState, Steadiness, RecordFolder);
- ``lifecycle``: the one window lifecycle (warm-up until steady, open/close, cool-down, cut, notes);
- ``stage``: one stage in this process (the closed-loop users; run_stage, run_stage_sync);
- ``processes``: one stage over N processes sharing one window (run_stage_processes);
- ``progress``: the once-a-second progress reports and the live line.
"""

from __future__ import annotations

from loadgen.client.loops import new_event_loop
from loadgen.run.lifecycle import Lifecycle, frozen_heap, stage_notes
from loadgen.run.processes import run_stage_processes
from loadgen.run.spec import Cut, Interrupted, RequestSource, RunOptions, StageSpec, WindowProbe
from loadgen.run.stage import CONNECT_BACKOFF_S, run_stage, run_stage_sync
from loadgen.run.window import (ENDED_KEEP_NS, FAR, FAR_NS, OPEN_AHEAD_NS, OPEN_SCRAPE_LEAD_NS, RecordFolder,
                                StageState, Steadiness)

__all__ = [
    "CONNECT_BACKOFF_S", "Cut", "ENDED_KEEP_NS", "FAR", "FAR_NS", "Interrupted", "Lifecycle", "OPEN_AHEAD_NS",
    "OPEN_SCRAPE_LEAD_NS", "RecordFolder", "RequestSource", "RunOptions", "StageSpec", "StageState", "Steadiness",
    "WindowProbe", "frozen_heap", "new_event_loop", "run_stage", "run_stage_processes", "run_stage_sync",
    "stage_notes",
]
