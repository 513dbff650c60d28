"""Running Locust for the tests: always in a child process (importing Locust monkey-patches the stdlib)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAMP = ROOT / "scenarios" / "ramp.py"
LOCUST = [sys.executable, "-m", "locust"]

FAST = ["--warmup", "0.5s", "--duration", "1s", "--sim-time-scale", "10"]
"""Short stages against a 10x simulator: figures are real, the run takes seconds."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def locust_cmd(*args: str) -> list[str]:
    return [*LOCUST, "-f", str(RAMP), *args]


def run_locust(*args: str, cwd=None, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(locust_cmd(*args), cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def start_locust(*args: str, cwd=None, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen(locust_cmd(*args), cwd=cwd or ROOT, stdout=out, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM (Locust's clean shutdown, also with the web UI up), then SIGKILL to the process group."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)


def get_json(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_for(pred, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as exc:  # not up yet
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last error: {last_exc})")


def results(folder: Path, name: str = "ramp.json") -> dict:
    return json.loads((folder / name).read_text())
