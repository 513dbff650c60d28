"""Open-loop ladders as a user runs them: ``loadgen capacity`` and ``loadgen run --trace`` against the embedded
simulators, ``loadgen crossover --rate --refine`` against simulators started here, real processes, and the
one-line errors of bad open-loop input.

What each test asserts holds whatever the host's speed: what was planned and sent, what the simulator's own
model says in virtual time, and what the analysis and the refine step must conclude from the stages as they
were measured (a stage the product leaves out, its dispatch lag flagged or its simulator starved, is part of
what was measured). How close a capacity or a rate crossover comes to the simulator's own is `loadgen bench
rates`'s (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math

import pytest

from loadgen.analysis.rates import rate_analysis
from loadgen.sim.process import SimProcess

from tests.cli.runner import in_process

SLOS = "ttft_p99=160ms,tpot_p50=8ms"


@pytest.fixture(scope="module")
def ladder(favoured_module, cli, tmp_path_factory):
    """Baseline and spec at 8 req/s (both keep up), 30 (both saturate: ~19 req/s is their capacity in the
    model) and 40 (not run: the ladder stops past saturation), with a capacity search of one stage each."""
    out = tmp_path_factory.mktemp("rates") / "out"
    p = cli("capacity", "--rate", "8,30,40", "--duration", "3s", "--warmup", "1s", "--max-tokens", "uniform:150,250",
            "--ignore-eos", "--capacity", SLOS, "--capacity-budget", "1", "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    return {"out": out, "p": p, "doc": json.loads((out / "run.json").read_text()),
            "rates": json.loads((out / "rates.json").read_text())}


def test_every_stage_is_open_loop_on_one_schedule(ladder):
    doc = ladder["doc"]
    assert doc["run"]["open_loop"]["axis"] == "rate" and doc["run"]["open_loop"]["arrival"] == "poisson"
    # the plan says what its values are: rates, not concurrencies
    assert {tuple(sorted(p)) for p in doc["run"]["planned_stages"]} == {("rate", "target", "workload")}
    by = {}
    for s in doc["stages"]:
        ol = s["open_loop"]
        # what came due was sent, or skipped in a cool-down already a second behind (a saturated stage)
        assert ol["planned"] == ol["sent"] + ol["skipped_late"] and ol["arrival"] == "poisson"
        assert s["requests"]["failed"] == 0 and s["dispatch_lag"]["count"] == s["requests"]["started"]
        by.setdefault(s["rate"], {})[s["target"]] = s
    b, s = by[8.0]["baseline"], by[8.0]["spec"]
    # one schedule: the same requests planned inside each target's window, and every one of them came back
    assert b["requests"]["started"] == s["requests"]["started"] > 0
    for d in (b, s):
        assert d["requests"]["completed"] == d["requests"]["started"] and d["open_loop"]["skipped_late"] == 0


def _saturated(ladder, label: str) -> dict[float, bool]:
    return {p["rate"]: p["saturated"] for p in ladder["rates"]["points"]["chat"] if p["target"] == label}


def test_saturation_is_detected_and_the_ladder_stops_there(ladder):
    r = ladder["rates"]
    for label in ("baseline", "spec"):
        sat, seen = r["saturation"]["chat"][label], _saturated(ladder, label)
        # 30 req/s is beyond what the modelled server can end, and a slower simulator ends fewer; 8 is well
        # within it (a simulator slowed to a third of its model still kept up with 14 req/s, measured)
        assert seen[30.0] and not seen[8.0], seen
        # the interval is read off the stages: the first saturated rate and the highest kept below it
        at = min(rate for rate, yes in seen.items() if yes)
        assert sat["at"] == at and sat["kept"] == max(rate for rate, yes in seen.items() if rate < at), (sat, seen)
        assert f"{label} saturates between {sat['kept']:.3g} and {at:.3g} req/s" in ladder["p"].stdout
        # the simulator's own saturation rate for these arrivals, in virtual time (18.8 and 19.9 req/s): between
        # the rung that kept up and the one that did not
        assert 8.0 < sat["truth"] < 30.0 and 17 < sat["truth"] < 22, sat
    assert 40.0 not in {s["rate"] for s in ladder["doc"]["stages"]}
    assert {x["value"] for x in ladder["doc"]["run"]["not_run"]} == {40.0}
    assert "not run, the server saturated at rate=30/s" in ladder["p"].stderr
    row = next(p for p in r["points"]["chat"] if p["rate"] == 30.0 and p["target"] == "baseline")
    assert row["saturated"] and row["ended_per_s"] < 0.9 * row["planned_per_s"]


def test_capacity_is_searched_stated_and_checked_against_the_simulator(ladder):
    r, out = ladder["rates"], ladder["p"].stdout
    assert "capacity: with spec, capacity under TTFT p99 ≤ 160 ms and TPOT p50 ≤ 8 ms is" in out
    extra = [s for s in ladder["doc"]["stages"] if s["rate"] not in (8.0, 30.0)]
    assert sorted(s["target"] for s in extra) == ["baseline", "spec"]  # one search stage each (budget 1)
    for label in ("baseline", "spec"):
        c = r["capacity"]["chat"][label]
        # the simulator's own capacity for these arrivals, in virtual time: 14.7 (baseline) and 15.8 (spec) req/s
        k = c["simulator_truth"]
        assert k["true"] is not None and 12 < k["true"] < 19
        assert f"  • {c['words']}  [{k['mark']} {k['words']}]" in out
        # the capacity follows from the stages it rests on: where they go from meeting the SLOs to failing
        # them (a saturated stage fails every one: its margin is infinite, null in JSON). A stage left out
        # (a starved simulator) is not among them; a simulator slowed by the host can fail them early
        rows = sorted(c["measured"], key=lambda x: x["rate"])
        left = {x["rate"] for x in r["left_out"].get("chat", []) if x["target"] == label}
        assert {x["rate"] for x in rows} | left == {s["rate"] for s in ladder["doc"]["stages"] if s["target"] == label}
        fails = [x["margin"] is None or x["margin"] > 0 for x in rows]
        if fails[0]:
            assert c["estimate"] is None and c["ci_high"] == rows[0]["rate"], c
            assert f"{label}: fails the SLOs already at the lowest rate measured" in out
        elif any(fails):
            k = fails.index(True)
            assert rows[k - 1]["rate"] <= c["estimate"] <= rows[k]["rate"], c
            assert c["ci_low"] <= c["estimate"] <= c["ci_high"], c
        else:
            assert c["estimate"] is None and c["ci_high"] is None, c
            assert f"{label}: meets the SLOs at every rate measured" in out
    html = (ladder["out"] / "report.html").read_text()
    assert "capacity" in html and "C=" not in html


def test_a_trace_replays(cli, tmp_path):
    out = tmp_path / "run.json"
    # the trace's 57 s at 8x: 7 s, 136 of its 162 requests planned after the warm-up
    p = cli("run", "--trace", "mooncake-small", "--trace-speed", "8", "--warmup", "0.5s", "--sim-time-scale", "5",
            "--out", str(out.parent))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    [s] = doc["stages"]
    assert [p["trace_speed"] for p in doc["run"]["planned_stages"]] == [8.0]
    assert s["open_loop"]["planned"] == s["open_loop"]["sent"] == 162
    assert s["workloads"].keys() == {"trace:mooncake-small"} and s["requests"]["failed"] == 0
    assert s["requests"]["started"] > 100
    assert "trace x8" in p.stderr


@pytest.mark.parametrize("args, says", [
    (["run", "--rate", "0,1"], "--rate: rates must be > 0"),
    (["run", "--rate", "2,1"], "--rate: rates must increase"),
    (["run", "--rate", "1", "--arrival", "gamma"], "--arrival 'gamma': gamma needs a burstiness"),
    (["run", "--rate", "1", "--arrival", "bursty"], "--arrival 'bursty': expected poisson, constant or gamma:CV"),
    (["run", "--rate", "1", "--max-in-flight", "0"], "--max-in-flight: must be >= 1, got 0"),
    (["run", "--max-in-flight", "4"], "--max-in-flight is for open-loop stages"),
    (["run", "--rate", "1", "--max-dispatch-lag", "0"], "--max-dispatch-lag: must be > 0, got 0"),
    (["run", "--rate", "1", "--trace", "mooncake-small"], "--rate and --trace: give one"),
    (["run", "--trace-speed", "2"], "--trace-speed needs --trace"),
    (["run", "--trace", "mooncake-small", "--trace-speed", "0"], "--trace-speed: rates must be > 0"),
    (["run", "--trace", "/nonexistent.jsonl"], "trace /nonexistent.jsonl: no such file"),
    (["crossover", "--capacity", "ttft_p99=1s"], "--capacity searches rates: give a --rate ladder"),
    (["crossover", "--rate", "1", "--capacity", "ttft=1s"], "--capacity: 'ttft=1s' is not METRIC_pNN=LIMIT"),
    (["capacity", "--rate", "1"], "loadgen capacity needs --capacity SLOS"),
])
def test_bad_open_loop_input_is_one_line(args, says):
    p = in_process(*args)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_bad_trace_line_is_named(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                   '{"timestamp": 5, "input_length": -3, "output_length": 5}\n')
    p = in_process("run", "--trace", str(bad))
    assert p.returncode == 2 and f"{bad}:2:" in p.stderr and "Traceback" not in p.stderr, p.stderr


LADDER = (3.0, 14.0)
MIDDLE = float(f"{math.sqrt(LADDER[0] * LADDER[1]):.3g}")  # 6.48: the geometric middle, to 3 digits
METRICS = ("decode_rate", "e2e_planned_mean", "tpot_p50", "e2e_planned_p50")


def test_refine_measures_a_rate_inside_the_crossover_and_narrows_it(favoured, cli, tmp_path):
    """--refine on the rate axis: a crossover found between 3 and 14 req/s (the simulator's ~9.7-9.9 at
    time-scale 5) gets both targets at the geometric middle, 6.48, and the intervals end at measured rates.

    The refine step reads the ladder's analysis, so the test does: a ladder stage the analysis leaves out
    (a client that could not keep the schedule, a starved simulator) leaves no crossover bracketed, and then
    nothing may be refined. Both outcomes are checked exactly against the stages as measured; the client and
    the simulators run ahead of the host's other work (`favoured`), so the first is the one a busy host sees.

    The simulators are started here, as the embedded ones run (time-scale 5, seed 0): a run against them
    has no simulator block, so it is not checked against the simulator's own in virtual time (tens of
    seconds of the simulator's scheduler this test does not read)."""
    out = tmp_path / "ref"
    with SimProcess(mode="baseline", time_scale=5, seed=0) as base, \
            SimProcess(mode="spec", time_scale=5, seed=0) as spec:
        p = cli("crossover", "--baseline-url", base.url, "--spec-url", spec.url, "--rate", "3,14", "--refine",
                "--refine-budget", "1", "--duration", "5s", "--warmup", "1s", "--max-tokens", "uniform:150,250",
                "--ignore-eos", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    assert doc["run"]["open_loop"]["ladder"] == list(LADDER)  # the added rate places, the ladder declares
    ladder_stages = [s for s in doc["stages"] if s["rate"] in LADDER]
    assert sorted((s["rate"], s["target"]) for s in ladder_stages) == [
        (r, t) for r in LADDER for t in ("baseline", "spec")]
    # the refine step's input: the analysis of the ladder's stages, as they were measured
    before = rate_analysis({**doc, "stages": ladder_stages}, ["baseline", "spec"], confidence=0.90,
                           seed=doc["run"]["seed"]).to_dict()
    # every metric's crossovers, as the refine step reads them
    found = [x for m in before["metrics"]["chat"]["spec"].values() for x in m["analysis"]["crossovers"]]
    added = sorted((s["rate"], s["target"]) for s in doc["stages"] if s["rate"] not in LADDER)
    print(f"crossovers the ladder bracketed: {len(found)}; left out: {before['left_out']['chat']}")
    if found:
        # two measured rates hold every interval, the gap 14/3 wider than --refine-width: its middle, once
        assert all((x["ci_low"], x["ci_high"]) == LADDER for x in found), found
        assert added == [(MIDDLE, "baseline"), (MIDDLE, "spec")], added
        assert p.stderr.count("refining the rate crossover:") == 1
        assert f"refining the rate crossover: both targets at {MIDDLE:g} req/s (chat)" in p.stderr
    else:
        assert added == [] and "refining" not in p.stderr
    res = json.loads((out / "rates.json").read_text())
    left = {(x["target"], x["rate"]) for x in res["left_out"]["chat"]}
    used = sorted({r for r in {s["rate"] for s in doc["stages"]}
                   if ("baseline", r) not in left and ("spec", r) not in left})  # both targets measured
    for name in METRICS:
        a = res["metrics"]["chat"]["spec"][name]["analysis"]
        assert [c["concurrency"] for c in a["comparisons"]] == used
        for x in a["crossovers"]:
            # an interval ends at measured rates, the middle among them where it was measured
            assert x["ci_low"] in used[:-1] and x["ci_high"] in used[1:], x
            assert x["ci_low"] <= x["estimate"] <= x["ci_high"], x
