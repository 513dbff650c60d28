"""A stage's progress: what it reports once a second, and the live line that shows it.

In: a running stage's client, folder and window state (``report_progress``),
or several processes' reports (``sum_progress``). Out: progress dicts
{phase, elapsed_s, completed, failed, tokens_per_s, remaining_s}, and the
terminal line :class:`ProgressLine` writes from them (stage, target, phase,
elapsed, requests, current tok/s, time left).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Callable

from loadgen.client.stream import StreamClient
from loadgen.run.order import fmt_span
from loadgen.run.spec import StageSpec
from loadgen.run.window import RecordFolder, StageState

_now = time.perf_counter_ns


class ProgressLine:
    """Rewrites one terminal line every second; on a pipe or file, prints a line every ``every_s``."""

    def __init__(self, label: str, stream=None, every_s: float = 10.0,
                 after_s: tuple[float, float, float | None] | None = None) -> None:
        self.label = label
        self.after_s = after_s
        """Estimated seconds of the stages after this one, (low, typical, high; None: not known): the run's ETA."""
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self._last_print = 0.0
        self._width = 0

    def __call__(self, p: dict) -> None:
        text = (f"  {self.label}: {p['phase']} {p['elapsed_s']:.0f} s, {p['completed']} done"
                + (f", {p['failed']} failed" if p["failed"] else "") + f", {p['tokens_per_s']:.0f} tok/s now")
        rest = p.get("remaining_s")
        if rest is not None:
            text += f"; stage ~{rest:.0f} s left"
            if self.after_s is not None and self.after_s != (0.0, 0.0, 0.0):
                lo, mid, hi = self.after_s
                text += f", run {fmt_span(rest + lo, rest + mid, None if hi is None else rest + hi)} left"
        if self.tty:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self.stream.flush()
        elif time.monotonic() - self._last_print >= self.every_s:
            self._last_print = time.monotonic()
            print(text, file=self.stream, flush=True)

    def done(self) -> None:
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()


async def report_progress(progress: Callable[[dict], None], client: StreamClient, folder: RecordFolder,
                          state: StageState, spec: StageSpec, t0: int) -> None:
    """Once a second: phase, elapsed time, requests finished, tokens/s (chunk arrivals over the last
    second) and the stage's remaining time as far as it can be told."""
    last_tokens, last_t = client.tokens_seen, _now()
    while True:
        await asyncio.sleep(1.0)
        t = _now()
        tps = (client.tokens_seen - last_tokens) / ((t - last_t) / 1e9)
        last_tokens, last_t = client.tokens_seen, t
        acc = folder.acc
        progress({"phase": state.phase(t), "elapsed_s": (t - t0) / 1e9,
                  "completed": acc.completed if acc else 0, "failed": acc.failed if acc else 0,
                  "tokens_per_s": tps, "remaining_s": remaining_s(state, spec, t)})


def remaining_s(state: StageState, spec: StageSpec, t: int) -> float | None:
    """The stage's time still to go: the rest of the warm-up (its cap, the pessimistic end), the
    window, and a cool-down of one request's duration; bounded by the stage's budget."""
    d = spec.expected_request_s or 0.0
    window = spec.duration_s if spec.duration_s is not None else None
    phase = state.phase(t)
    if phase == "warm-up":
        cap = spec.max_warmup_s if spec.max_warmup_s is not None else spec.warmup_s
        rest = max(0.0, cap - (t - state.t0) / 1e9) + (window or 0.0) + d
    elif phase == "window":
        rest = (max(0.0, (state.we - t) / 1e9) if window is not None else 0.0) + d
    else:
        rest = max(0.0, d - (t - state.we) / 1e9)
    if spec.max_stage_s:
        rest = min(rest, max(0.0, spec.max_stage_s - (t - state.t0) / 1e9))
    return rest


def sum_progress(parts: list[dict]) -> dict:
    """One progress line for several processes: counts and rates add, phase and time are the slowest's."""
    order = {"warm-up": 0, "window": 1, "cool-down": 2}
    rem = [p["remaining_s"] for p in parts if p.get("remaining_s") is not None]
    return {"phase": min((p["phase"] for p in parts), key=lambda ph: order.get(ph, 0)),
            "elapsed_s": max(p["elapsed_s"] for p in parts),
            "completed": sum(p["completed"] for p in parts), "failed": sum(p["failed"] for p in parts),
            "tokens_per_s": sum(p["tokens_per_s"] for p in parts), "remaining_s": max(rem) if rem else None}
