"""The stop conditions as one protocol: consulted in order before a stage, all told after it."""

from __future__ import annotations

import time

from loadgen.run import stops
from loadgen.run.stops import RUN, Deadline, Decision


class Fixed:
    def __init__(self, first: Decision, then: Decision = RUN) -> None:
        self.first, self.then, self.asked = first, then, 0

    def before(self, i, slot) -> Decision:
        self.asked += 1
        return self.first

    def after(self, i, slot, d) -> Decision:
        return self.then


def test_the_first_stop_that_does_not_run_decides_and_the_tightest_budget_runs():
    skip = Fixed(Decision("skip", why="saturated at 30", said="the server saturated"))
    later = Fixed(Decision("stop"))
    assert stops.before([Fixed(RUN), skip, later], 0, None) is skip.first and later.asked == 0
    tight = Decision("run", budget=5.0, by="max-run-time")
    assert stops.before([Fixed(Decision("run", budget=9.0, by="max-stage-time")), Fixed(tight), Fixed(RUN)], 0,
                        None) == tight
    assert stops.before([Fixed(RUN)], 0, None) == RUN


def test_after_a_stage_every_stop_is_told_and_any_ends_the_run():
    said = Fixed(RUN, Decision("run", said="offered 8 req/s"))
    assert stops.after([said, Fixed(RUN)], 0, None, {}) == (False, ["offered 8 req/s"])
    assert stops.after([said, Fixed(RUN, Decision("stop"))], 0, None, {}) == (True, ["offered 8 req/s"])


def test_a_fixed_length_stage_starts_only_when_it_ends_within_the_budget():
    now = time.monotonic()
    assert Deadline(None, now, lambda i: 1e9, 3).before(0, None) == RUN  # no budget: every stage
    assert Deadline(60.0, now, lambda i: 3.5, 3).before(0, None) == RUN
    assert Deadline(60.0, now, lambda i: 90.0, 3).before(0, None).action == "stop"
    spent = Deadline(1.0, now - 5.0, lambda i: 0.0, 3)
    assert spent.before(1, None).action == "stop"  # a request-count window (0 s) after the budget: none
    assert spent.after(0, None, {}).action == "stop" and spent.after(2, None, {}) == RUN  # the last: nothing left
