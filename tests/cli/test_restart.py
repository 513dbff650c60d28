"""Servers that die mid-ladder (issue 17, item 4), with real processes: a started server that exits during a
stage is started again and the stage run once more (marked ``retried`` in run.json); one that never comes
back ends the run with what was measured kept and one line; a server loadgen did not start records its
failures and the ladder goes on."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.cli.runner import free_port, nothing_listens, start, stderr_until

# The server's start command: the embedded simulator under a wrapper that kills it and exits when the test
# drops a "die" file beside it; a wrapper started again while a "dead" file is there exits at once (a box
# whose GPU is gone).
WRAPPER = textwrap.dedent("""
    import os, subprocess, sys, time
    here, argv = sys.argv[1], sys.argv[2:]
    if os.path.exists(os.path.join(here, "dead")):
        print("cannot start: the GPU fell off the bus", flush=True)
        sys.exit(3)
    sim = subprocess.Popen([sys.executable, "-m", "loadgen", "sim", *argv])
    while sim.poll() is None:
        if os.path.exists(os.path.join(here, "die")):
            os.remove(os.path.join(here, "die"))
            sim.kill()
            sim.wait()
            print("simulated crash", flush=True)
            sys.exit(1)
        time.sleep(0.05)
    sys.exit(sim.returncode)
""")
FLAGS = ["--ladder", "1,2", "--duration", "1s", "--warmup", "0.5s", "--max-tokens", "64", "--no-report"]


def crash_during_second_stage(tmp_path, *argv, die=None, timeout=120):
    """Run ``loadgen crossover *argv``; once it says its second stage has begun, drop the die file (in ``die``,
    by default ``tmp_path``); its exit, stdout and stderr."""
    p = start("crossover", *argv, *FLAGS, "--out", str(tmp_path / "xo"))
    try:
        head = stderr_until(p, "[2/4]")
        ((die or tmp_path) / "die").touch()
        so, se = p.communicate(timeout=timeout)
    finally:
        p.kill()
    return p.returncode, so, head + se


def starts(tmp_path, port):
    wrap = tmp_path / "wrap.py"
    wrap.write_text(WRAPPER)
    sim = f"{sys.executable} {wrap} {tmp_path} --port {port} --time-scale 10 --mode"
    return ["--url", f"http://127.0.0.1:{port}", "--baseline-start", f"{sim} baseline", "--spec-start", f"{sim} spec"]


def test_a_server_that_dies_during_a_stage_is_started_again_and_the_stage_run_once_more(live, tmp_path):
    port = free_port()
    rc, so, se = crash_during_second_stage(tmp_path, *starts(tmp_path, port))
    assert rc == 0, se
    doc = json.loads((tmp_path / "xo" / "run.json").read_text())
    got = [(s["target"], s["concurrency"], "retried" in s) for s in doc["stages"]]
    assert got == [("baseline", 1, False), ("baseline", 2, True), ("spec", 1, False), ("spec", 2, False)], se
    retried = doc["stages"][1]
    assert retried["retried"]["why"] == "baseline's server exited (status 1) during the stage", retried["retried"]
    assert set(retried["retried"]["first_try"]) == {"completed", "failed"}  # what the first try counted
    assert "cut where it was" in se  # the first try stopped when the server exited, not run to its end
    assert retried["requests"]["failed"] == 0 and retried["requests"]["completed"] > 0
    assert any("run twice" in n for n in retried["notes"])
    assert "starting it again in 1 s (attempt 1 of 2)" in se
    log = (tmp_path / "xo" / "baseline.server.log").read_text()
    assert "simulated crash" in log
    assert "workload chat: output throughput" in so
    assert nothing_listens(port)


def test_a_server_that_never_comes_back_ends_the_run_with_what_was_measured(live, tmp_path):
    port = free_port()
    argv = starts(tmp_path, port)
    out = tmp_path / "xo"
    p = start("crossover", *argv, *FLAGS, "--out", str(out))
    try:
        head = stderr_until(p, "[2/4]")
        (tmp_path / "dead").touch()  # no start from now on succeeds
        (tmp_path / "die").touch()
        so, se = p.communicate(timeout=120)
    finally:
        p.kill()
    se = head + se
    assert p.returncode == 1, se
    err = [line for line in se.splitlines() if "error:" in line]
    assert len(err) == 1 and "did not come back after 2 restarts" in err[0] and "fell off the bus" in err[0], se
    doc = json.loads((out / "run.json").read_text())
    assert [(s["target"], s["concurrency"]) for s in doc["stages"]] == [("baseline", 1)]
    assert doc["run"]["cut"]["by"] == "error" and "did not come back" in doc["run"]["cut"]["error"]
    # analysed: what was measured is kept, and the one line says nothing could be compared (not a second error)
    assert "loadgen: nothing compared: 1 of 1 stages measured, without a comparable stage" in se and so == "", se
    assert nothing_listens(port)


def test_a_server_loadgen_did_not_start_records_its_failures_and_the_ladder_goes_on(live, tmp_path):
    ports = free_port(), free_port()
    wrap = tmp_path / "wrap.py"
    wrap.write_text(WRAPPER)
    for mode in ("baseline", "spec"):
        (tmp_path / mode).mkdir()
    sims = [subprocess.Popen([sys.executable, str(wrap), str(tmp_path / mode), "--port", str(port), "--time-scale",
                              "10", "--mode", mode], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
            for port, mode in zip(ports, ("baseline", "spec"))]
    try:
        for port in ports:
            deadline = time.monotonic() + 30
            while nothing_listens(port) and time.monotonic() < deadline:
                time.sleep(0.1)
        base, spec = (f"http://127.0.0.1:{port}" for port in ports)
        # the baseline's server dies after its first stage, during the spec's; nobody starts it again
        rc, so, se = crash_during_second_stage(tmp_path, "--baseline-url", base, "--spec-url", spec,
                                               die=tmp_path / "baseline")
    finally:
        for s in sims:  # the wrapper and the simulator it started (killing the wrapper alone left the spec's)
            os.killpg(s.pid, signal.SIGKILL)
            s.wait()
    assert rc == 0, se
    doc = json.loads((tmp_path / "xo" / "run.json").read_text())
    got = [(s["target"], s["concurrency"]) for s in doc["stages"]]
    assert got == [("baseline", 1), ("spec", 1), ("baseline", 2), ("spec", 2)]
    assert not any("retried" in s for s in doc["stages"])
    assert doc["stages"][2]["requests"]["failed"] > 0  # the baseline's server was gone
    assert doc["stages"][3]["requests"]["failed"] == 0 and doc["stages"][3]["requests"]["completed"] > 0
