"""``loadgen bench rates`` as real processes: one seed's run kept with --keep, then analysed again from what
was kept (--from) against the simulator's answers from another number of requests; and its bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def bench(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen", "bench", "rates", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_a_kept_run_is_checked_again_from_its_folder(live, tmp_path):
    keep = tmp_path / "kept"
    # 3 and 14 req/s bracket the simulators' crossovers at time-scale 5 (5 s windows found two metrics' there)
    p = bench("--seeds", "1", "--first-seed", "3", "--ladder", "3,14", "--duration", "5s", "--time-scale", "5",
              "--capacity-budget", "0", "--keep", str(keep), "--json", str(tmp_path / "live.json"))
    assert p.returncode == 0, p.stderr[-2000:]
    (first,) = json.loads((tmp_path / "live.json").read_text())
    assert first["seed"] == 3 and "error" not in first, first
    assert (keep / "seed3" / "run.json").exists() and (keep / "seed3" / "rates.json").exists()

    # the simulator's answers from fewer requests than the run's 2,000: the analysis is what is compared
    again = bench("--from", str(keep), "--truth-requests", "200", "--json", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stderr[-2000:]
    (row,) = json.loads((tmp_path / "again.json").read_text())
    assert row["seed"] == 3 and row["seconds"] is None  # nothing was run
    # the same analysis of the same stages: the same crossovers (the truth beside them is the new one's)
    # crossovers to compare, or the stages no analysis used named (a client that could not keep the schedule, a
    # starved simulator: the row says so, and nothing is bracketed)
    assert any(first["crossovers"].values()) or first["left_out"], first
    for name, xs in first["crossovers"].items():
        assert [x["ci"] for x in row["crossovers"][name]] == [x["ci"] for x in xs], name
        for x in row["crossovers"][name]:
            assert x["true"] is None or 3.0 <= x["true"] <= 14.0, x
    assert "metric            seeds  confirmed  covered" in again.stdout


def test_bad_input_is_one_line(live, tmp_path):
    p = bench("--from", str(tmp_path))
    assert p.returncode != 0 and p.stderr.strip() == f"loadgen bench rates: no seed*/run.json under {tmp_path}"
    n = os.cpu_count() or 1
    p = bench("--parallel", str(n + 1), "--cores-per-seed", "1", "--seeds", "2")
    assert p.returncode != 0 and "needs" in p.stderr and "cores" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_row_names_the_stages_no_analysis_used():
    from loadgen.bench.rate_bench import row_of

    res = {"metrics": {"chat": {"spec": {}}},
           "left_out": {"chat": [{"target": "baseline", "rate": 20.0,
                                  "why": "its embedded simulator was starved of CPU (it served slower than its model)"}]}}
    row = row_of(7, res, None)
    assert row["left_out"] == ["baseline@20: its embedded simulator was starved of CPU (it served slower than its model)"]
    assert row["crossovers"] == {name: [] for name in row["crossovers"]} and row["capacity"] == {}
