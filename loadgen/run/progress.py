"""A live progress line for long runs: stage, target, phase, elapsed, requests, current tok/s."""

from __future__ import annotations

import sys
import time


class ProgressLine:
    """Rewrites one terminal line every second; on a pipe or file, prints a line every ``every_s``."""

    def __init__(self, label: str, stream=None, every_s: float = 10.0, after_s: float | None = None) -> None:
        self.label = label
        self.after_s = after_s
        """Estimated seconds of the stages after this one (the run's ETA), None if not known."""
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
            if self.after_s:
                total = rest + self.after_s
                text += f", run ~{total / 60:.1f} min left" if total >= 120 else f", run ~{total:.0f} s left"
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
