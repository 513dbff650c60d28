"""Processes for measuring: the known-schedule server, and core pinning.

On a 2-core machine the server and the client must not share a core, or each
one's figures include the other's work (DEVELOPERS.md: pin with taskset).
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager


def _spare_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@contextmanager
def schedserver(*args: str, cpu: int | None = 0):
    """``loadgen.bench.schedserver`` in its own process (pinned to ``cpu`` when there are 2+ cores)."""
    pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None and len(_spare_cores()) > 1 else None
    p = subprocess.Popen([sys.executable, "-m", "loadgen.bench.schedserver", *args],
                         stdout=subprocess.PIPE, text=True, preexec_fn=pre)
    try:
        line = p.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"schedserver did not start: {line!r}")
        yield line.split()[-1]
    finally:
        p.terminate()
        p.wait(5)


@contextmanager
def pinned(cpu: int):
    """Run this process on one core for the duration (the server has another)."""
    before = os.sched_getaffinity(0)
    if len(before) > 1:
        os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
