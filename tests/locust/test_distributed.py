"""Master + two worker processes on loopback: stage results merge exactly; a dead worker is survived."""

import glob
import json
import os
import signal
import time
from pathlib import Path

import pytest

from helpers import FAST, free_port, results, start_locust, stop, wait_for

MERGED_COUNTERS = ("started", "completed", "failed")


def _cluster(tmp_path, *args, log_name="master.log"):
    port = free_port()
    master = start_locust("--master", "--headless", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                          "--master-bind-port", str(port), *args, cwd=tmp_path, log=tmp_path / log_name)
    workers = [start_locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), cwd=tmp_path,
                            log=tmp_path / f"worker{i}.log") for i in range(2)]
    return master, workers


def _parts(folder: Path, stage_index: int) -> list[dict]:
    return [json.loads(Path(f).read_text()) for f in sorted(glob.glob(str(folder / "parts" / f"ramp-s{stage_index:02d}-*.json")))]


def test_master_merges_two_workers_histograms_exactly(tmp_path):
    out = tmp_path / "out"
    master, workers = _cluster(tmp_path, "--ladder", "2", *FAST, "--out", str(out), "--keep-parts")
    try:
        rc = master.wait(120)
    finally:
        for p in (master, *workers):
            stop(p)
    log = (tmp_path / "master.log").read_text()
    assert rc == 0, log[-3000:]
    stages = results(out)["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2)]
    for s in stages:
        parts = _parts(out, s["stage_index"])
        assert len(parts) == 2 and all(p["result"] for p in parts), parts
        assert len({p["worker"] for p in parts}) == 2
        assert s["client"]["processes"] == 2 and not s["incomplete"]
        rs = [p["result"] for p in parts]
        for name in s["histograms"]:
            assert s[name].get("count", 0) == sum(r[name].get("count", 0) for r in rs), name
        for k in MERGED_COUNTERS:
            assert s["requests"][k] == sum(r["requests"][k] for r in rs), k
        assert s["output_tokens"] == sum(r["output_tokens"] for r in rs)
        assert s["requests"]["completed"] > 0
        assert all(r["requests"]["completed"] > 0 for r in rs)  # one user on each worker
        for wl, m in s["workloads"].items():
            assert m["itl"].get("count", 0) == sum(r["workloads"].get(wl, {}).get("itl", {}).get("count", 0)
                                                   for r in rs)


@pytest.mark.slow
def test_dead_worker_master_says_so_keeps_the_rest_marks_stage_incomplete(tmp_path):
    out = tmp_path / "out"
    master, workers = _cluster(tmp_path, "--ladder", "2", "--warmup", "1s", "--duration", "8s",
                               "--sim-time-scale", "10", "--out", str(out), "--keep-parts")
    try:
        wait_for(lambda: "stage 1/2: baseline C=2" in (tmp_path / "master.log").read_text(), 60, "stage 1")
        time.sleep(3.0)  # inside the steady window
        os.killpg(workers[0].pid, signal.SIGKILL)
        rc = master.wait(120)
    finally:
        for p in (master, *workers):
            stop(p)
    log = (tmp_path / "master.log").read_text()
    stages = results(out)["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [("baseline", 2), ("spec", 2)], log[-3000:]
    first, second = stages
    # The master said so, in one line naming the worker and the stage.
    assert "went missing (no heartbeat) during stage 1 (baseline C=2); keeping the other workers' data, " \
           "stage marked incomplete" in log
    assert first["incomplete"] and any("its share is missing" in n for n in first["notes"])
    # The surviving worker's data is there.
    parts = [p for p in _parts(out, 0) if p["result"]]
    assert len(parts) == 1 and first["client"]["processes"] == 1
    assert first["requests"]["completed"] == parts[0]["result"]["requests"]["completed"] > 0
    # The next stage ran on the remaining worker with all its users and is complete.
    assert not second["incomplete"] and second["client"]["processes"] == 1
    assert second["requests"]["completed"] > 0
    assert rc is not None
