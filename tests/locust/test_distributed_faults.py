"""Distributed Locust runs that lose a process (issue 17, item 5): a worker killed mid-stage, a worker that joins
late, the master killed mid-run — each with a real master and real workers on loopback."""

import glob
import json
import os
import signal
import time
from pathlib import Path

from helpers import free_port, results, start_locust, stop, wait_for

SHORT = ["--warmup", "0.5s", "--sim-time-scale", "5"]
COUNTERS = ("started", "completed", "failed")


def _master(tmp_path, expect: int, *args):
    port = free_port()
    master = start_locust("--master", "--headless", "--expect-workers", str(expect), "--master-bind-host",
                          "127.0.0.1", "--master-bind-port", str(port), *args, cwd=tmp_path,
                          log=tmp_path / "master.log")
    return master, port


def _worker(tmp_path, port: int, name: str, *args: str):
    return start_locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), *args, cwd=tmp_path,
                        log=tmp_path / f"{name}.log")


SLOW_INIT = """
import gevent
from locust import events
from locust.runners import WorkerRunner


@events.init.add_listener
def _slow(environment, runner=None, **kw):
    # a busy host's worker: connected to the master (Locust gives it users), loadgen's handlers not yet there
    if isinstance(runner, WorkerRunner):
        gevent.sleep(3)


from loadgen.locust import LLMUser, RampShape, install  # noqa: E402,F401

install()
"""


def _log(tmp_path, name="master.log") -> str:
    return (tmp_path / name).read_text()


def _parts(out: Path, stage_index: int) -> list[dict]:
    return [json.loads(Path(f).read_text())
            for f in sorted(glob.glob(str(out / "parts" / f"ramp-s{stage_index:02d}-*.json")))]


def _sums_match(stage: dict, parts: list[dict]) -> None:
    """The merged stage is exactly the sum of the parts that reported: nothing counted twice, nothing lost."""
    rs = [p["result"] for p in parts]
    for k in COUNTERS:
        assert stage["requests"][k] == sum(r["requests"][k] for r in rs), k
    assert stage["output_tokens"] == sum(r["output_tokens"] for r in rs)
    for name in stage["histograms"]:
        assert stage[name].get("count", 0) == sum(r[name].get("count", 0) for r in rs), name


def test_worker_killed_mid_stage_is_merged_without_and_the_ladder_goes_on(live, tmp_path):
    out = tmp_path / "out"
    master, port = _master(tmp_path, 2, "--ladder", "2", *SHORT, "--duration", "3s", "--out", str(out),
                           "--keep-parts")
    workers = [_worker(tmp_path, port, f"worker{i}") for i in range(2)]
    try:
        wait_for(lambda: "stage 1/2: baseline C=2" in _log(tmp_path), 60, "stage 1")
        time.sleep(1.5 + 1.0)  # start lead + warm-up, then 1 s into the 3 s window
        os.killpg(workers[0].pid, signal.SIGKILL)
        t_kill = time.monotonic()
        rc = master.wait(90)
        took = time.monotonic() - t_kill
    finally:
        for p in (master, *workers):
            stop(p)
    log = _log(tmp_path)
    print(f"master exited {took:.1f} s after the kill")
    assert rc is not None, log[-3000:]
    stages = results(out)["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2)], log[-3000:]
    first, second = stages
    assert first["incomplete"] and first["client"]["processes"] == 1
    assert any("went missing (no heartbeat): its share is missing" in n for n in first["notes"]), first["notes"]
    # the master said so, in one line naming the worker and the stage
    assert "went missing (no heartbeat) during stage 1 (baseline C=2); keeping the other workers' data, " \
           "stage marked incomplete" in log
    kept = [p for p in _parts(out, 0) if p["result"]]
    assert len(kept) == 1
    _sums_match(first, kept)
    assert first["requests"]["completed"] > 0
    assert not second["incomplete"] and second["client"]["processes"] == 1
    _sums_match(second, [p for p in _parts(out, 1) if p["result"]])
    assert second["requests"]["completed"] > 0


def test_late_worker_starts_the_running_stage_over_and_its_part_merges(live, tmp_path):
    out = tmp_path / "out"
    # a 3 s window: the late worker's start-up (about 1.6 s here) lands well inside stage 1's first attempt
    master, port = _master(tmp_path, 1, "--ladder", "2", *SHORT, "--duration", "3s", "--out", str(out),
                           "--keep-parts")
    workers = [_worker(tmp_path, port, "worker0")]
    (tmp_path / "slow_init.py").write_text(SLOW_INIT)
    try:
        wait_for(lambda: "stage 1/2: baseline C=2" in _log(tmp_path), 60, "stage 1")
        # its handlers come 3 s after it connected: the stage is begun again only once they are there (a
        # cold suite's worker that got the stage message 163 ms after connecting, before them, ran none of it)
        workers.append(_worker(tmp_path, port, "worker1", "-f", str(tmp_path / "slow_init.py")))
        rc = master.wait(90)
    finally:
        for p in (master, *workers):
            stop(p)
    log = _log(tmp_path)
    assert rc == 0, log[-3000:]
    stages = results(out)["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2)], log[-3000:]
    # It joined before stage 1's window closed: Locust moved one of the two users to it at once, so stage 1
    # started over on both workers (said in the log and the stage), and both stages ran one user on each.
    assert "joined before its window closed" in log, log[-3000:]
    assert "waiting for worker 1 (" in log and "Unknown message type" not in _log(tmp_path, "worker1.log")
    assert any(n.startswith("started over: worker 1 (") for n in stages[0]["notes"]), stages[0]["notes"]
    for s in stages:
        parts = _parts(out, s["stage_index"])
        assert s["client"]["processes"] == 2 and not s["incomplete"], s["notes"]
        assert len({p["worker"] for p in parts}) == 2
        assert all(p["result"]["requests"]["completed"] > 0 for p in parts)  # the late worker's too
        _sums_match(s, parts)
        assert not any("while the stage kept 2 open" in n for n in s["notes"]), s["notes"]


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _master_killed(tmp_path, sig):
    out = tmp_path / "out"
    master, port = _master(tmp_path, 2, "--ladder", "2", *SHORT, "--duration", "2s", "--out", str(out))
    workers = [_worker(tmp_path, port, f"worker{i}") for i in range(2)]
    try:
        wait_for(lambda: "stage 2/2: spec C=2" in _log(tmp_path), 60, "stage 2")
        time.sleep(1.5)  # inside stage 2's warm-up or window
        os.kill(master.pid, sig)  # the master alone, not its process group
        t_kill = time.monotonic()
        for w in workers:
            w.wait(30)  # raises if a worker is still there
        took = time.monotonic() - t_kill
        # the master and its embedded simulators are gone too: on SIGTERM it stops them, on SIGKILL they get
        # their parent's death signal (loadgen/sim/process.py)
        master.wait(15)
        wait_for(lambda: _group_gone(master.pid), 15, "the master's simulators to stop")
    finally:
        for p in (master, *workers):
            stop(p)
        try:  # whatever a failed assertion above left
            os.killpg(master.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    print(f"workers exited {took:.1f} s after the master got {sig.name}")
    return out, took


def test_master_sigkilled_workers_exit_and_the_finished_stage_is_on_disk(live, tmp_path):
    out, took = _master_killed(tmp_path, signal.SIGKILL)
    # Nothing told them: they quit on their master timeout (distributed.MASTER_TIMEOUT_S, 10 s; Locust's is 60 s,
    # which the 30 s wait for each worker would not have seen out)
    for i in range(2):
        log = _log(tmp_path, f"worker{i}.log")
        assert "Didn't get heartbeat from master in over 10" in log and "Got quit message" not in log, log[-2000:]
    doc = results(out)
    assert [(s["target"], s["concurrency"]) for s in doc["stages"]] == [("baseline", 2)]
    assert doc["stages"][0]["requests"]["completed"] > 0 and not doc["stages"][0]["incomplete"]
    assert "finished_unix" not in doc["run"]  # the run was never closed: it says so by what it lacks


def test_master_sigtermed_workers_exit_and_the_finished_stage_is_on_disk(live, tmp_path):
    out, took = _master_killed(tmp_path, signal.SIGTERM)
    for i in range(2):  # the master told them to quit
        assert "Got quit message from master" in _log(tmp_path, f"worker{i}.log"), _log(tmp_path, f"worker{i}.log")
    doc = results(out)
    assert [(s["target"], s["concurrency"]) for s in doc["stages"]] == [("baseline", 2)]
    assert doc["stages"][0]["requests"]["completed"] > 0
    assert doc["run"]["interrupted"] is True and "finished_unix" in doc["run"]
    assert "test stopped during stage 2/2 (spec C=2); that stage is not written" in _log(tmp_path)
