"""Helpers for the load tests: run loadgen / Locust as a user would, and watch the server's /metrics.

* :func:`client_cpus` — the cores left to the load client (all but the servers' core).
* :func:`run_cli` — a command in a child process pinned to those cores, with a timeout and
  its own process group (killed if it outlives the timeout).
* :func:`run_killing_server` — a run whose server is killed under it once a condition holds.
* :func:`gone`, :func:`group_gone` — nothing left behind: a process, a whole process group.
* :class:`ServerTotals` — what a llama-server counted (generated tokens, drafts) while a
  ``with`` block ran: its ``/metrics`` read on entry and on exit.
* :class:`MetricsPoller` — scrapes a llama-server's ``/metrics`` a few times a second in a
  thread, each scrape stamped with CLOCK_MONOTONIC (the clock loadgen stamps its stage
  windows with), so counter differences can be taken over any stage's window afterwards
  (tests/e2e/figures.py's server-side decode rate).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
LOADGEN = [sys.executable, "-m", "loadgen"]
LOCUST = [sys.executable, "-m", "locust"]


def client_cpus(server_cpu: int | None) -> set[int]:
    cpus = set(os.sched_getaffinity(0))
    if server_cpu is not None and len(cpus) > 1:
        cpus.discard(server_cpu)
    return cpus


def run_cli(cmd: list[str], *, cpus: set[int] | None = None, timeout: float = 240, cwd: Path | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd`` to completion, pinned to ``cpus``; on timeout its whole process group is killed."""

    def preexec() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    proc = subprocess.Popen(cmd, cwd=cwd or REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=preexec, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(cmd[:4])} ... timed out after {timeout:g} s; stderr tail:\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_killing_server(cmd: list[str], cpus: set[int], server, ready: Callable[[], bool],
                       timeout: float = 300) -> tuple[subprocess.CompletedProcess, int, int]:
    """Run ``cmd`` (loadgen) pinned to ``cpus``, SIGKILL ``server``'s whole process group once ``ready()``
    holds, and let the run end; returns it, its pid (its process group's) and the server's pid. Whatever is
    left of the run is killed."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not ready():
            time.sleep(0.02)
        server_pid = server.proc.pid
        os.killpg(server_pid, signal.SIGKILL)
        server.proc.wait(timeout=30)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), proc.pid, server_pid


def gone(pid: int) -> bool:
    """The process has ended (a zombie not reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def group_gone(pgid: int) -> bool:
    """No live process is left in the group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    # zombies in the group (already exited, not yet reaped by a non-reaping init) count as gone
    return all(gone(int(p)) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


# --------------------------------------------------------------------------- /metrics


KEYS = ("llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total",
        "llamacpp:predicted_tokens_seconds", "llamacpp:spec_decode_num_draft_tokens_total",
        "llamacpp:spec_decode_num_accepted_tokens_total")


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            if key in KEYS:
                out[key] = float(value)
    return out


@dataclass
class Decode:
    """What the server says it generated between two instants (requests that *ended* in between)."""

    tokens: float = 0.0
    """Generated tokens (``tokens_predicted_total``)."""
    steps: float = 0.0
    """Tokens after each request's first (the first comes from the prompt pass): llama.cpp's
    ``predicted_per_token_ms`` divides by these."""
    seconds: float = 0.0
    """Sum over requests of first-to-last-token time (``tokens_predicted_seconds_total``)."""
    drafted: float = 0.0
    accepted: float = 0.0

    @property
    def ms_per_token(self) -> float | None:
        return 1000 * self.seconds / self.steps if self.steps else None


class ServerTotals:
    """What the server counted while in the ``with`` block: ``/metrics`` read on entry and on exit."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before: dict[str, float] = {}
        self.after: dict[str, float] = {}

    def __enter__(self) -> "ServerTotals":
        self.before = scrape(self.url)
        return self

    def __exit__(self, *exc: object) -> None:
        self.after = scrape(self.url)

    def total(self) -> Decode:
        b, a = self.before, self.after
        diff = lambda key: a.get(key, 0.0) - b.get(key, 0.0)  # noqa: E731
        return Decode(tokens=diff(KEYS[0]), seconds=diff(KEYS[1]), drafted=diff(KEYS[3]), accepted=diff(KEYS[4]))


class MetricsPoller:
    """Scrape ``/metrics`` every ``interval`` s in a thread, while in the ``with`` block.

    llama-server's ``predicted_tokens_seconds`` gauge is the decode rate (steps / time) of the
    requests that ended since the previous scrape, reset by every scrape; times the difference
    of ``tokens_predicted_seconds_total`` over the same interval it gives the steps. So this
    must be the only client scraping that server while it runs.
    """

    def __init__(self, url: str, interval: float = 0.05) -> None:
        self.url = url
        self.interval = interval
        self.samples: list[tuple[int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.errors = 0

    def _run(self) -> None:
        while True:
            try:
                m = scrape(self.url)
                self.samples.append((time.monotonic_ns(), m))
            except OSError:
                self.errors += 1
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "MetricsPoller":
        self.samples.append((time.monotonic_ns(), scrape(self.url)))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        try:
            self.samples.append((time.monotonic_ns(), scrape(self.url)))
        except OSError:
            pass

    def between(self, start_ns: int, end_ns: int) -> Decode:
        """Counters summed over the scrape intervals lying inside [start_ns, end_ns]."""
        d = Decode()
        s = self.samples
        for (t0, a), (t1, b) in zip(s, s[1:]):
            if t0 < start_ns or t1 > end_ns:
                continue
            dt = b[KEYS[1]] - a[KEYS[1]]
            d.tokens += b[KEYS[0]] - a[KEYS[0]]
            d.seconds += dt
            d.steps += b[KEYS[2]] * dt
            d.drafted += b.get(KEYS[3], 0.0) - a.get(KEYS[3], 0.0)
            d.accepted += b.get(KEYS[4], 0.0) - a.get(KEYS[4], 0.0)
        return d

    def total(self) -> Decode:
        return self.between(self.samples[0][0], self.samples[-1][0])
