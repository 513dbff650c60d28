"""The gevent ↔ asyncio bridge, in a child process with Locust's monkey-patching applied."""

import json
import subprocess
import sys
from pathlib import Path


def test_bridge_runs_asyncio_in_a_real_thread_and_wakes_greenlets(live):
    p = subprocess.run([sys.executable, str(Path(__file__).with_name("bridge_probe.py"))],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["loop"] == "stamping"  # the default: one poll-return clock per wake-up (loadgen/client/loops.py)
    assert out["loop_thread"] != out["main_thread"]  # a real OS thread, not a greenlet
    assert out["error"] == "from the loop"
    # 300 × 0.3 s naps ran concurrently (one after another: 90 s), and no wait held gevent's hub for a nap
    assert out["values_ok"] and out["concurrent_s"] < 9.0
    assert out["hub_max_gap_s"] < 0.3
    assert out["killed_cancels_task"] and out["cancel_raises"] and out["stopped"]
