"""`locust -f scenarios/ramp.py --headless`: a short two-target ramp, and one-line errors before any load."""

import csv
import socket
import subprocess
import sys

import pytest

from loadgen.stage.result import StageAccumulator, StageResult

from helpers import FAST, results, run_locust


def test_short_ramp_writes_both_targets_stage_by_stage(live, tmp_path):
    # From an empty folder with no config: the embedded simulators (baseline and spec) start themselves.
    p = run_locust("--headless", "--ladder", "1,2", *FAST, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = results(tmp_path / "results" / "ramp")
    stages = doc["stages"]
    assert [(s["target"], s["concurrency"]) for s in stages] == [
        ("baseline", 1), ("spec", 1), ("baseline", 2), ("spec", 2)]
    assert [s["stage_index"] for s in stages] == [0, 1, 2, 3]
    for s in stages:
        assert s["requests"]["completed"] > 0 and s["requests"]["failed"] == 0, s["requests"]
        assert s["output_tokens_per_s"] > 0 and s["ttft"]["count"] > 0 and s["itl"]["count"] > 0
        assert not s["incomplete"], s["notes"]
    # Speculation shows up where it should: several tokens per chunk and an accept length.
    assert all(s["tokens_per_chunk"]["mean"] == 1.0 for s in stages if s["target"] == "baseline")
    assert all(s["tokens_per_chunk"]["mean"] > 1.2 and s["accept_length"]["count"] > 0
               for s in stages if s["target"] == "spec")
    # The same shape as `loadgen run`'s stages: StageResult.to_dict, readable back.
    empty = StageAccumulator(0, 10**9, 10**8).result(target="t", url="u", protocol="p", concurrency=1).to_dict()
    for s in stages:
        assert set(empty) <= set(s)
        assert StageResult.from_dict(s).to_dict()["itl"] == s["itl"]
    run = doc["run"]
    assert run["order"] == ["baseline@1", "spec@1", "baseline@2", "spec@2"] and run["finished_unix"]
    assert run["interrupted"] is False and run["simulator"]["modes"] == {"baseline": "baseline", "spec": "spec"}
    assert run["roles"] == {"baseline": "baseline", "spec": "spec"}
    assert run["configurations"] == {"reference": "baseline", "candidates": ["spec"], "adaptive": []}
    rows = list(csv.DictReader(open(tmp_path / "results" / "ramp" / "ramp.csv")))
    assert [(r["target"], r["concurrency"]) for r in rows] == [("baseline", "1"), ("spec", "1"),
                                                               ("baseline", "2"), ("spec", "2")]
    assert "Tag=spec/c2/s3/itl" in (tmp_path / "results" / "ramp" / "ramp.hlog").read_text()
    # Locust's own table names requests by target and workload.
    assert "baseline/chat" in p.stderr and "spec/chat" in p.stderr
    # The terminal table at the end.
    assert "TTFT p50" in p.stdout
    # Then, after Locust's own tables, the answer: what `loadgen crossover --from` prints of the same file, and
    # the command that writes the report
    ramp = tmp_path / "results" / "ramp" / "ramp.json"
    x = subprocess.run([sys.executable, "-m", "loadgen", "crossover", "--from", str(ramp), "--no-report",
                        "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=300)
    assert x.returncode == 0 and "workload chat: output throughput" in x.stdout, x.stderr
    last = "loadgen: the report (report.html) and crossover.json: loadgen crossover --from results/ramp/ramp.json"
    assert p.stdout.rstrip("\n").endswith(x.stdout.rstrip("\n") + "\n" + last), p.stdout[-3000:]


def _port_nobody_listens_on() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("toml,args,message", [
    ("[run]\nladdr = [1, 2]\n", (), "loadgen: error: bad.toml: run.laddr: unknown key: did you mean run.ladder?"),
    ("[run]\nladder = \"fast\"\n", (), "loadgen: error: bad.toml: run.ladder: 'fast' is not a comma-separated list of whole numbers"),
    ("[run]\nladder = []\n", (), "loadgen: error: bad.toml: run.ladder: the list of concurrencies is empty"),
    ("[run]\nladder = [1, 10, 5]\n", (), "loadgen: error: bad.toml: run.ladder: concurrencies must increase, got 5 after 10"),
    ("[run]\nwarmup = [5]\n", (), "loadgen: error: bad.toml: run.warmup: expected a duration"),
    ("", ("--ladder", "2,1"), "loadgen: error: --ladder: concurrencies must increase, got 1 after 2"),
    ("[targets.spec]\nurl = \"http://127.0.0.1:PORT\"\n", (),
     "loadgen: error: bad.toml: targets.spec.url: cannot reach http://127.0.0.1:PORT: "),
])
def test_bad_config_is_one_line_before_any_load(live, tmp_path, toml, args, message):
    port = str(_port_nobody_listens_on())
    (tmp_path / "bad.toml").write_text(toml.replace("PORT", port))
    p = run_locust("--headless", "--config", str(tmp_path / "bad.toml"), *args, cwd=tmp_path, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.replace("PORT", port)), p.stderr
    assert p.stdout == ""
    assert not (tmp_path / "results").exists()  # no simulator, no stage, no file


def test_processes_mode_fails_before_forking(live, tmp_path):
    (tmp_path / "bad.toml").write_text("[run]\nladder = [3, 3]\n")
    p = run_locust("--headless", "--processes", "2", "--config", str(tmp_path / "bad.toml"), cwd=tmp_path,
                   timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "loadgen: error: bad.toml: run.ladder: concurrencies must increase, got 3 after 3"]


def test_max_run_time_ends_the_ramp_before_a_stage_that_would_overrun_it(live, tmp_path):
    # a stage is its spawn, 1 s of warm-up and 2 s of window (3.5 s): the first fits in 6 s, four never do
    p = run_locust("--headless", "--ladder", "1,2,3,4", "--warmup", "1s", "--duration", "2s", "--sim-time-scale", "10",
                   "--max-run-time", "6s", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = results(tmp_path / "results" / "ramp")
    ran = len(doc["stages"])
    assert 1 <= ran < 4 and doc["run"]["cut"] == {"by": "max-run-time", "stages_not_run": 8 - ran}, doc["run"]["cut"]
    for s in doc["stages"]:  # a stage that started kept its plan: nothing of it was cut
        assert not s.get("cut") and not s["incomplete"] and s["window"]["duration_s"] == 2.0, s["notes"]
    assert f"--max-run-time reached: {8 - ran} planned stage(s) not run" in p.stderr
