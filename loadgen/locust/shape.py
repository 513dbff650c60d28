"""The ramp as a Locust LoadTestShape: one stage at a time, in the run's stage order.

Locust calls ``tick()`` about once a second on the local runner or the master;
the conductor answers with the current stage's user count (= its concurrency)
and moves to the next stage only when every load process has reported the
stage's result — so a stage's length is its warm-up, steady window and
cool-down, whatever they take, never a fixed clock. A tick after a finished
or stopped ramp (the web UI's start button again) begins a new run.
"""

from __future__ import annotations

from locust import LoadTestShape


class RampShape(LoadTestShape):
    """A@C1, B@C1, A@C2, B@C2, ... for two targets, a rotation for more (the conductor's plan; conductor.py)."""

    use_common_options = False

    def tick(self):
        conductor = getattr(self.runner.environment, "loadgen_conductor", None) if self.runner else None
        if conductor is None:
            return None
        return conductor.tick()
