"""Open-loop ladders as a user runs them: ``loadgen crossover --rate``/``loadgen capacity`` and ``loadgen run
--trace`` against the embedded simulators, real processes, and the one-line errors of bad open-loop input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def loadgen(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    """Baseline and spec at 3 and 8 req/s (both keep up), 30 (both saturate: ~19 req/s is their capacity,
    sim.openloop) and 40 (not run: the ladder stops past saturation), with a capacity search."""
    out = tmp_path_factory.mktemp("rates") / "out"
    p = loadgen("capacity", "--rate", "3,8,30,40", "--duration", "6s", "--warmup", "2s", "--max-tokens",
                "uniform:150,250", "--ignore-eos", "--capacity", "ttft_p99=160ms,tpot_p50=8ms", "--capacity-budget", "1",
                "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    return {"out": out, "p": p, "doc": json.loads((out / "run.json").read_text()),
            "rates": json.loads((out / "rates.json").read_text())}


def test_every_stage_is_open_loop_on_one_schedule(ladder):
    doc = ladder["doc"]
    assert doc["run"]["open_loop"]["axis"] == "rate" and doc["run"]["open_loop"]["arrival"] == "poisson"
    by = {}
    for s in doc["stages"]:
        ol = s["open_loop"]
        # what came due was sent, or skipped in a cool-down already a second behind (a saturated stage)
        assert ol["planned"] == ol["sent"] + ol["skipped_late"] and ol["arrival"] == "poisson"
        if s["rate"] < 30:
            assert ol["skipped_late"] == 0
        by.setdefault(s["rate"], {})[s["target"]] = s
    for r in (3.0, 8.0):
        b, s = by[r]["baseline"], by[r]["spec"]
        # one schedule: the same requests planned inside each target's window
        assert b["requests"]["started"] == s["requests"]["started"] > 0
        for d in (b, s):
            assert d["requests"]["failed"] == 0 and d["dispatch_lag"]["count"] == d["requests"]["completed"]


def test_saturation_is_detected_and_the_ladder_stops_there(ladder):
    r = ladder["rates"]
    for label in ("baseline", "spec"):
        sat = r["saturation"]["chat"][label]
        # kept up at 8 (or at a capacity search's rate between 8 and 30), not at 30
        assert 8.0 <= sat["kept"] < 30.0 and sat["at"] == 30.0, sat
        assert f"{label} saturates between {sat['kept']:.3g} and 30 req/s" in ladder["p"].stdout
        # the simulator's own saturation rate (~19 req/s at time-scale 5) lies in that interval
        assert sat["kept"] <= sat["truth"] <= 30.0, sat
    assert 40.0 not in {s["rate"] for s in ladder["doc"]["stages"]}
    assert {x["value"] for x in ladder["doc"]["run"]["not_run"]} == {40.0}
    assert "not run, the server saturated at rate=30/s" in ladder["p"].stderr
    row = next(p for p in r["points"]["chat"] if p["rate"] == 30.0 and p["target"] == "baseline")
    assert row["saturated"] and row["ended_per_s"] < 0.9 * row["planned_per_s"]


def test_capacity_is_searched_stated_and_checked_against_the_simulator(ladder):
    r, out = ladder["rates"], ladder["p"].stdout
    assert "capacity: with spec, capacity under TTFT p99 ≤ 160 ms and TPOT p50 ≤ 8 ms is" in out
    extra = [s for s in ladder["doc"]["stages"] if s["rate"] not in (3.0, 8.0, 30.0)]
    assert {s["target"] for s in extra} == {"baseline", "spec"}  # one search stage each (budget 1)
    starved = {x["target"] for x in r.get("left_out", {}).get("chat", [])
               if x["rate"] == 30.0 and "starved" in x["why"]}
    for label in ("baseline", "spec"):
        c = r["capacity"]["chat"][label]
        # the simulator's own capacity for these arrivals: 14.8 (baseline) and 16.5 (spec) req/s
        assert c["truth"] is not None and 12 < c["truth"] < 19
        if label in starved:
            # this 2-core machine can starve the simulator at 30 req/s (on an idle VM, both targets, in two
            # of three runs): the stage is left out, and the capacity is only known to lie above the searched rate
            assert c["estimate"] is None and c["ci_high"] is None and c["ci_low"] <= c["truth"], c
            assert f"{label}: meets the SLOs at every rate measured" in out
            continue
        assert c["estimate"] is not None and c["ci_low"] <= c["estimate"] <= c["ci_high"]
        assert abs(c["estimate"] / c["truth"] - 1) < 0.35, c
    html = (ladder["out"] / "report.html").read_text()
    assert "capacity" in html and "C=" not in html


def test_a_trace_replays_against_the_simulator(tmp_path):
    out = tmp_path / "run.json"
    p = loadgen("run", "--trace", "mooncake-small", "--trace-speed", "4", "--warmup", "1s", "--sim-time-scale", "5",
                "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    [s] = json.loads(out.read_text())["stages"]
    assert s["open_loop"]["planned"] == s["open_loop"]["sent"] == 162
    assert s["workloads"].keys() == {"trace:mooncake-small"} and s["requests"]["failed"] == 0
    assert s["requests"]["started"] > 100
    assert "trace x4" in p.stderr


@pytest.mark.parametrize("args, says", [
    (["run", "--rate", "0,1"], "--rate: rates must be > 0"),
    (["run", "--rate", "2,1"], "--rate: rates must increase"),
    (["run", "--rate", "1", "--arrival", "gamma"], "--arrival 'gamma': gamma needs a burstiness"),
    (["run", "--rate", "1", "--arrival", "bursty"], "--arrival 'bursty': expected poisson, constant or gamma:CV"),
    (["run", "--rate", "1", "--max-in-flight", "0"], "--max-in-flight must be >= 1"),
    (["run", "--max-in-flight", "4"], "--max-in-flight is for open-loop stages"),
    (["run", "--rate", "1", "--max-dispatch-lag", "0"], "--max-dispatch-lag must be > 0"),
    (["run", "--rate", "1", "--trace", "mooncake-small"], "--rate and --trace: give one"),
    (["run", "--trace-speed", "2"], "--trace-speed needs --trace"),
    (["run", "--trace", "mooncake-small", "--trace-speed", "0"], "--trace-speed: rates must be > 0"),
    (["run", "--trace", "/nonexistent.jsonl"], "trace /nonexistent.jsonl: no such file"),
    (["crossover", "--capacity", "ttft_p99=1s"], "--capacity searches rates: give a --rate ladder"),
    (["crossover", "--rate", "1", "--capacity", "ttft=1s"], "--capacity: 'ttft=1s' is not METRIC_pNN=LIMIT"),
    (["capacity", "--rate", "1"], "loadgen capacity needs --capacity SLOS"),
])
def test_bad_open_loop_input_is_one_line(args, says):
    p = loadgen(*args, timeout=60)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_bad_trace_line_is_named(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                   '{"timestamp": 5, "input_length": -3, "output_length": 5}\n')
    p = loadgen("run", "--trace", str(bad), timeout=60)
    assert p.returncode == 2 and f"{bad}:2:" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_refine_measures_a_rate_inside_the_crossover_and_narrows_it(tmp_path):
    """--refine on the rate axis: the crossover between 3 and 14 req/s (the simulator's ~9.7-9.9 at
    time-scale 5) gets both targets at their geometric middle, 6.48, and the interval ends there."""
    for attempt in range(2):
        out = tmp_path / f"ref{attempt}"
        # --max-dispatch-lag 30: this test is about refining; on a slow 2-core host the client sharing its cores
        # with both simulators held sends at 14 req/s with a lag p99 of 10.7 ms against the default bound of 10
        # (the flag has its own tests, tests/run/test_openloop.py)
        p = loadgen("crossover", "--rate", "3,14", "--refine", "--refine-budget", "1", "--duration", "8s", "--warmup",
                    "2s", "--max-tokens", "uniform:150,250", "--ignore-eos", "--max-dispatch-lag", "30",
                    "--out", str(out), "--no-report")
        assert p.returncode == 0, p.stderr[-3000:]
        left = json.loads((out / "rates.json").read_text())["left_out"]["chat"]
        # a busy 2-core CI host once held the client past its schedule at 14 req/s: that stage is left out
        # (rightly) and nothing brackets a crossover; run once more, as the keep-up test does
        if not left:
            break
    assert not left, left
    assert "refining the rate crossover: both targets at 6.48 req/s (chat)" in p.stderr
    doc = json.loads((out / "run.json").read_text())
    assert sorted((s["rate"], s["target"]) for s in doc["stages"]) == [
        (r, t) for r in (3.0, 6.48, 14.0) for t in ("baseline", "spec")]
    assert doc["run"]["open_loop"]["ladder"] == [3.0, 14.0]  # the added rate places, the ladder declares
    per = json.loads((out / "rates.json").read_text())["metrics"]["chat"]["spec"]
    found = 0
    for name in ("decode_rate", "e2e_planned_mean", "tpot_p50", "e2e_planned_p50"):
        a = per[name]["analysis"]
        assert [c["concurrency"] for c in a["comparisons"]] == [3.0, 6.48, 14.0]
        for x in a["crossovers"]:
            found += 1
            assert x["ci_low"] in (3.0, 6.48) and x["ci_high"] in (6.48, 14.0), x  # measured rates
            assert x["ci_low"] <= x["estimate"] <= x["ci_high"]
    assert found >= 2, p.stdout
