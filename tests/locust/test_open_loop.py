"""`locust -f scenarios/ramp.py --rate …`: the open-loop ramp against embedded simulators, local and distributed.

Every window's request count is checked against the schedule itself (loadgen.timing.arrivals with the
run's seed): a dispatcher that dropped, added or moved a send, or a worker that took the wrong share
of the schedule, changes it.
"""

import csv
import glob
import json
import subprocess
import sys
from pathlib import Path

from loadgen.timing.arrivals import arrivals

from helpers import ROOT, free_port, results, run_locust, start_locust, stop

WARMUP_S, WINDOW_S = 0.5, 1.5
OPEN = ["--warmup", f"{WARMUP_S}s", "--duration", f"{WINDOW_S}s", "--sim-time-scale", "10"]


def _in_window(rate: float, seed: int = 0) -> list[int]:
    """Positions in the schedule of the arrivals planned inside the window [warm-up, warm-up + window)."""
    times = arrivals(float(rate), "poisson").until(seed, WARMUP_S + WINDOW_S + 1.0)  # the run parses rates as floats
    return [i for i, t in enumerate(times) if WARMUP_S <= t < WARMUP_S + WINDOW_S]


def _check_open_stage(s: dict, rate: float) -> None:
    ol = s["open_loop"]
    assert s["rate"] == rate and ol["rate"] == rate and ol["arrival"] == "poisson"
    # what came due was sent, or skipped in a cool-down already a second behind
    assert ol["planned"] == ol["sent"] + ol["skipped_late"] and ol["sent"] > 0 and ol["held_by_cap"] == 0, ol
    # the flag says what the lag was (how small it stays on the bridge, ~0.4 ms p99 on a quiet core, is the
    # host's: a worker held off its core for 20-140 ms was seen to flag a stage, rightly)
    lag = ol["dispatch_lag_ms"]
    flagged_reason = any("dispatch lag" in r for r in s["client"]["reasons"])
    assert ol["lag_flagged"] == (lag["p99"] > 10) == flagged_reason, (ol, s["client"]["reasons"])
    # exactly the schedule's window arrivals were sent and counted in the window, and all came back
    assert s["requests"]["started"] == len(_in_window(rate)), (s["requests"], _in_window(rate))
    assert s["requests"]["completed"] == s["requests"]["started"] and s["requests"]["failed"] == 0
    assert s["dispatch_lag"]["count"] == s["e2e_planned"]["count"] == s["requests"]["started"]
    assert s["concurrency"] == 0 and not s["incomplete"], s["notes"]
    assert not any("more than the stage's" in n for n in s["notes"]), s["notes"]  # no C to hold an open loop to


def test_rate_ladder_two_targets_writes_rate_stages_and_crossover_reads_them(live, tmp_path):
    p = run_locust("--headless", "--rate", "4,8", *OPEN, "--csv", str(tmp_path / "locust"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = results(tmp_path / "results" / "ramp")
    stages = doc["stages"]
    # the concurrency ramp's order, its values rates
    assert [(s["target"], s["rate"]) for s in stages] == [("baseline", 4), ("spec", 4), ("baseline", 8), ("spec", 8)]
    for s in stages:
        _check_open_stage(s, s["rate"])
    run = doc["run"]
    assert run["order"] == ["baseline@4/s", "spec@4/s", "baseline@8/s", "spec@8/s"] and run["ladder"] == [4, 8]
    assert run["open_loop"]["axis"] == "rate" and run["open_loop"]["ladder"] == [4, 8]
    assert run["configurations"]["reference"] == "baseline"
    # Locust's own statistics got one request event per finished request (warm-up and cool-down ones too)
    rows = {r["Name"]: r for r in csv.DictReader(open(tmp_path / "locust_stats.csv"))}
    for label in ("baseline", "spec"):
        count = int(rows[f"{label}/chat"]["Request Count"])
        mine = [s for s in stages if s["target"] == label]
        assert sum(s["requests"]["started"] for s in mine) <= count <= sum(s["open_loop"]["sent"] for s in mine)
    assert "rate/s" in p.stdout  # the terminal's open-loop table
    # the analysis reads the Locust ramp's document as it reads loadgen run --rate's
    cx = subprocess.run([sys.executable, "-m", "loadgen", "crossover", "--from",
                         str(tmp_path / "results" / "ramp" / "ramp.json"), "--out", str(tmp_path / "cx")],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cx.returncode == 0, (cx.stdout[-2000:], cx.stderr[-3000:])


def test_a_saturated_target_runs_no_higher_rate_as_the_scripted_ramp(live, tmp_path):
    # ~80-token requests: the model ends about 45 a second (tests/cli/test_rates_cli.py: ~19 of 200 tokens), so
    # 80 req/s saturates, 8 keeps up on a quiet host; a fixed 2 s warm-up holds a second of requests
    (tmp_path / "sat.toml").write_text('[run]\nmax_tokens = "uniform:60,100"\nignore_eos = true\n')
    p = run_locust("--headless", "--config", "sat.toml", "--rate", "8,80,100", "--warmup", "2s", "--duration", "3s",
                   cwd=tmp_path, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = results(tmp_path / "results" / "ramp")
    saturated = {(s["target"], s["rate"]) for s in doc["stages"] if "SATURATED" in _line(p.stderr, s)}
    # a rate runs for a target unless a lower one saturated it; what did not run says why, as the CLI writes it
    for s in doc["stages"]:
        assert not any(t == s["target"] and r < s["rate"] for t, r in saturated), (s["target"], s["rate"], saturated)
    not_run = {(x["target"], x["value"]) for x in doc["run"].get("not_run", [])}
    planned = {(t, r) for t in ("baseline", "spec") for r in (8.0, 80.0, 100.0)}
    assert not_run == planned - {(s["target"], s["rate"]) for s in doc["stages"]}
    assert not_run == {(t, r) for t, r in planned if any(u == t and q < r for u, q in saturated)}
    assert {t for t, _ in saturated} == {"baseline", "spec"}, saturated  # both by 80 req/s at the latest
    for t, r in not_run:
        at = min(q for u, q in saturated if u == t)
        assert f"{t} rate={r:g}/s: not run, the server saturated at rate={at:g}/s" in p.stderr


def _line(err: str, s: dict) -> str:
    """The stop conditions' line of a stage (offered, ended, lag; SATURATED and why), as the Locust log has it."""
    head = f": {s['target']} rate={s['rate']:g}/s"
    i = next(i for i, ln in enumerate(err.splitlines()) if "done" in ln and head in ln)
    return next(ln for ln in err.splitlines()[i:] if "offered " in ln)


def test_master_and_two_workers_share_one_schedule(live, tmp_path):
    out = tmp_path / "out"
    port = free_port()
    master = start_locust("--master", "--headless", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                          "--master-bind-port", str(port), "--rate", "8", *OPEN, "--out", str(out), "--keep-parts",
                          cwd=tmp_path, log=tmp_path / "master.log")
    workers = [start_locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port), cwd=tmp_path,
                            log=tmp_path / f"worker{i}.log") for i in range(2)]
    try:
        rc = master.wait(120)
    finally:
        for proc in (master, *workers):
            stop(proc)
    assert rc == 0, (tmp_path / "master.log").read_text()[-3000:]
    stages = results(out)["stages"]
    assert [(s["target"], s["rate"]) for s in stages] == [("baseline", 8), ("spec", 8)]
    inside = _in_window(8)
    # worker k of 2 takes arrivals k, k+2, …: its window share is the schedule's positions of its parity
    shares = sorted([sum(1 for i in inside if i % 2 == k) for k in (0, 1)])
    for s in stages:
        _check_open_stage(s, 8)
        assert s["client"]["processes"] == 2
        parts = [json.loads(Path(f).read_text())["result"]
                 for f in sorted(glob.glob(str(out / "parts" / f"ramp-s{s['stage_index']:02d}-*.json")))]
        assert len(parts) == 2
        assert sorted(r["requests"]["started"] for r in parts) == shares
        assert sum(r["open_loop"]["planned"] for r in parts) == s["open_loop"]["planned"]
        assert abs(parts[0]["open_loop"]["planned"] - parts[1]["open_loop"]["planned"]) <= 1


def test_max_in_flight_without_rate_is_one_line(live, tmp_path):
    p = run_locust("--headless", "--max-in-flight", "4", cwd=tmp_path, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["loadgen: error: --max-in-flight is for open-loop stages: give --rate"]
    assert not (tmp_path / "results").exists()
