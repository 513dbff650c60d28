"""Helpers for the load tests: run loadgen / Locust as a user would, and watch the server's /metrics.

* :func:`client_cpus` — the cores left to the load client (all but the servers' core).
* :func:`run_cli` — a command in a child process pinned to those cores, with a timeout and
  its own process group (killed if it outlives the timeout).
* :class:`MetricsPoller` — scrapes a llama-server's ``/metrics`` a few times a second in a
  thread, each scrape stamped with CLOCK_MONOTONIC (the clock loadgen stamps its stage
  windows with), so counter differences can be taken over any stage's window afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

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


def decode_ms_per_token(url: str, tokens: int = 24) -> float:
    """The server's own decode time a token for one short request (llama.cpp's timings), best of two."""
    best = float("inf")
    for _ in range(2):
        body = json.dumps({"prompt": "Write a short story about a lighthouse.", "n_predict": tokens,
                           "ignore_eos": True, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            best = min(best, float(json.loads(r.read())["timings"]["predicted_per_token_ms"]))
    return best


def stretched(seconds: float, stretch: float) -> str:
    """A --duration value: ``seconds`` (sized for conftest.REF_MS_PER_TOKEN) times the host's stretch."""
    return f"{seconds * stretch:.1f}s"


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

    def requests_ended(self, start_ns: int, end_ns: int) -> tuple[list[tuple[int, float]], int]:
        """Requests that ended in [start_ns, end_ns], one by one where the scrapes allow.

        Each request adds ``n`` tokens but only ``n - 1`` steps, so a scrape interval's
        ``tokens - steps`` is the number of requests that ended in it. Where that is 1, the
        interval's differences are that one request's ``(tokens, first-to-last-token ms)``.
        Returns those, and how many requests ended in intervals shared with others.
        """
        singles: list[tuple[int, float]] = []
        shared = 0
        for tokens, ms, ended in self._intervals(start_ns, end_ns):
            if ended == 1:
                singles.append((tokens, ms))
            else:
                shared += max(ended, 1)
        return singles, shared

    def per_token_ms(self, start_ns: int, end_ns: int) -> list[float]:
        """The server's first-to-last-token time per step of the requests that ended in [start_ns, end_ns]:
        one value per scrape interval, a single request's own or, where several ended in one interval,
        their mean (their tokens − their count steps over their summed generation time)."""
        return [ms / (tokens - ended) for tokens, ms, ended in self._intervals(start_ns, end_ns)
                if tokens - max(ended, 1) > 0]

    def _intervals(self, start_ns: int, end_ns: int) -> Iterator[tuple[int, float, int]]:
        """(tokens, first-to-last-token ms, requests ended) of each scrape interval in the span that moved."""
        s = self.samples
        for (t0, a), (t1, b) in zip(s, s[1:]):
            if t0 < start_ns or t1 > end_ns:
                continue
            tokens = round(b[KEYS[0]] - a[KEYS[0]])
            if not tokens:
                continue
            seconds = b[KEYS[1]] - a[KEYS[1]]
            yield tokens, 1000 * seconds, round(tokens - b[KEYS[2]] * seconds)
