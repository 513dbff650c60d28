"""Master + two worker processes on loopback: stage results merge exactly (a worker that dies, joins late or
loses its master: test_distributed_faults.py)."""

import glob
import json
from pathlib import Path

from helpers import FAST, free_port, results, start_locust, stop

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


def test_master_merges_two_workers_histograms_exactly(live, tmp_path):
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
