"""An embedded simulator that does not get the CPU serves slower than the server it models: the stage says
so (its ``simulator`` block, a note) and the analyses leave it out. Real processes: a simulator paused
and resumed by signals under a real `loadgen run`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from loadgen.analysis.compare import _slices
from loadgen.analysis.rates import _why_left_out
from loadgen.serverview import simclock
from loadgen.stage.saturation import saturation


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sim(favoured):
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "loadgen", "sim", "--port", str(port), "--time-scale", "5"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            break
        except OSError:
            time.sleep(0.1)
    yield p, url
    p.kill()
    p.wait()


def _run(url: str, out) -> dict:
    p = subprocess.run([sys.executable, "-m", "loadgen", "run", "--url", url, "--ladder", "8", "--duration", "3s",
                        "--warmup", "1s", "--max-tokens", "64", "--ignore-eos", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (st,) = json.loads((out / "run.json").read_text())["stages"]
    return st


def test_a_paused_simulator_is_told_apart_from_one_that_kept_its_clock(sim, tmp_path):
    proc, url = sim
    kept = _run(url, tmp_path / "kept")
    assert kept["simulator"]["forwards"] > 100 and not kept["simulator"]["starved"], kept["simulator"]
    assert not [n for n in kept["notes"] if "starved" in n]

    stop = threading.Event()

    def pause_often() -> None:  # 60 ms of every 80 the simulator's process does not run
        while not stop.is_set():
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(0.06)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.02)

    t = threading.Thread(target=pause_often, daemon=True)
    t.start()
    try:
        starved = _run(url, tmp_path / "starved")
    finally:
        stop.set()
        t.join()
        os.kill(proc.pid, signal.SIGCONT)
    block = starved["simulator"]
    print("\nkept:", kept["simulator"], "\npaused:", block)
    assert block["starved"] and block["behind_forwards"] >= simclock.STARVED_BEHIND, block
    assert any("starved of CPU" in n for n in starved["notes"]), starved["notes"]

    # no analysis uses it: the concurrency ladder's slices and the rate axis's stages
    assert _slices({"stages": [kept, starved]}) == {k: v[:1] for k, v in _slices({"stages": [kept]}).items()}
    assert "starved" in _why_left_out(starved, saturation(starved))


def test_other_servers_and_restarts_give_no_block():
    assert simclock.read("http://127.0.0.1:9", {"server_info": {"version": "0.5"}}) is None  # not a simulator
    assert simclock.read("http://127.0.0.1:9", {"server_info": {"loadgen_sim": {}}}) is None  # no answer
    C = simclock.Clock
    assert simclock.over(C(100, 5, 9.0, 500.0), C(50, 1, 2.0, 300.0)) is None  # started again: its counters began anew
    # 200 forwards of 2 ms modelled (400 ms), 5 late, 100 ms lateness in all: a quarter of a forward behind
    assert simclock.over(C(100, 5, 9.0, 500.0), C(300, 10, 109.0, 900.0)) == {
        "forwards": 200, "late_forwards": 5, "late_share": 0.025, "mean_late_ms": 0.5, "behind_forwards": 0.25,
        "starved": False}
    # the same forwards 4 of theirs behind on average: starved
    assert simclock.over(C(100, 5, 9.0, 500.0), C(300, 10, 1609.0, 900.0))["starved"]
