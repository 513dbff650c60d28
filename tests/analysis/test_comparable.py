"""A stage enters a comparison only when it measured the load it claims (analysis.coverage.not_comparable), and
one metric says where to enable speculation (analysis.compare.DECIDES): the others say where each is better.

The case is the H200's (issue 27): llama.cpp's baseline at C=256 whose server ran a median of 36 requests at
once, and whose window opened with 254 of 256 first requests unfinished, read as "speculation is better at
C=256, +99.7 %". Here the same faults on a synthetic run (tests/report/synth.py), each beside its control:
the same run without the fault compares the stage, so the test fails if the gate does nothing.
"""

import copy

import pytest

from loadgen.analysis.compare import BY_NAME, DECIDES, RunAnalysis, run_analysis
from loadgen.analysis.crossover import analyze
from loadgen.analysis.verdict import verdict
from loadgen.report.terminal import crossover_tables
from tests.analysis.test_api import ladder_with
from tests.analysis.test_serverview import block, gauge
from tests.report.synth import run_doc

LADDER = (1, 5, 30, 100)


@pytest.fixture(scope="module")
def doc():
    return run_doc(ladder=LADDER, workloads=("freetext",), flags=False)


def _stage(doc, target, c):
    return next(s for s in doc["stages"] if s["target"] == target and s["concurrency"] == c)


def _below_c(doc):
    d = copy.deepcopy(doc)
    # the H200 stage's gauge, at this ladder's top: a median of 36 running, 61 at most, the rest queued
    b = block(100, running=gauge(40.2, p50=36, mx=61), queued=60.0, verdict="below C")
    b["checks"]["running"].update(running_p50=36, running_mean=40.2, running_max=61)
    _stage(d, "baseline", 100)["server"] = b
    return d


def _not_streaming(doc):
    d = copy.deepcopy(doc)
    _stage(d, "baseline", 100)["warmup"] = {"users": 100, "not_streaming": 98, "first_done": 2}
    return d


def _compared(res):
    per = res["workloads"]["freetext"]
    return {name: [c["concurrency"] for c in m["analysis"]["comparisons"]] for name, m in per.items()}


def test_the_control_compares_the_top_stage(doc):
    res = run_analysis(doc).to_dict()
    assert _compared(res)["output_tokens_per_s"] == list(LADDER)
    assert res["coverage"]["freetext"]["missing"] == []


@pytest.mark.parametrize("fault, why", [
    (_below_c, "baseline not comparable: the server ran a median of 36 of its 100 requests at once"),
    (_not_streaming, "baseline not comparable: 98 of 100 users' first requests were not yet streaming when the "
                     "window opened (longer --warmup)"),
])
def test_a_stage_that_did_not_run_its_load_is_named_and_not_compared(doc, fault, why):
    res = run_analysis(fault(doc)).to_dict()
    for name, cs in _compared(res).items():
        assert 100 not in cs, name  # no comparison there, so no winner, in any metric
    assert _compared(res)["output_tokens_per_s"] == [1, 5, 30]
    cov = res["coverage"]["freetext"]
    assert cov["missing"] == [{"concurrency": 100, "why": why}] and 100 not in cov["compared"]
    assert not any(f["concurrency"] == 100 for f in cov["flagged"])  # not a compared stage with a flag
    for name, m in res["workloads"]["freetext"].items():
        assert f"C=100 ({why})" in m["caveat"], (name, m["caveat"])
    text = crossover_tables(RunAnalysis.from_dict(res))
    # its row in the table names no winner, and the line below it says why
    assert [line.split()[1:] for line in text.splitlines() if line.lstrip().startswith("100 ")] == [
        ["-", "-", "-", "-", "not", "compared"]], text
    assert f"  C=100 not compared: {why}" in text


def test_one_request_short_is_a_users_resend_gap_and_comparable(doc):
    """A simulator stage at C=4 with 32-token requests read 3, 3 and 4 running: "below C" by the check's 90 %,
    one user between requests at two scrapes; the load was C's. Two short at C=5 is not."""
    d = copy.deepcopy(doc)
    b = block(5, running=gauge(4.3, p50=4, mx=5), verdict="below C")
    b["checks"]["running"].update(running_p50=4, running_mean=4.3, running_max=5)
    _stage(d, "baseline", 5)["server"] = b
    assert _compared(run_analysis(d).to_dict())["output_tokens_per_s"] == list(LADDER)
    b["checks"]["running"].update(running_p50=3)
    assert _compared(run_analysis(d).to_dict())["output_tokens_per_s"] == [1, 30, 100]


def test_a_server_at_its_own_cap_measured_its_load(doc):
    """"capped": the server ran its most, the rest of C queued; what it served is the load C offers it."""
    d = copy.deepcopy(doc)
    b = block(100, running=gauge(48, p50=48, mx=48), queued=52.0, verdict="capped", cap=48)
    _stage(d, "baseline", 100)["server"] = b
    assert _compared(run_analysis(d).to_dict())["output_tokens_per_s"] == list(LADDER)


# --------------------------------------------------------------------------- one metric decides

def test_a_latency_percentile_worse_with_speculation_explains_and_does_not_advise():
    """The H200's predictable text: throughput +35-43 % with speculation at C=1-16, and ITL p99 (the gap after a
    burst of accepted drafts) worse at each; its bullet said "do not enable speculation". Here the same ITL p99
    comparison judged as the deciding metric (the control) and as the latency beside it."""
    bs, ss = ladder_with({1: 0.2, 4: 0.25, 16: 0.3}, hib=False)  # speculation's ITL p99 20-30 % higher
    a = analyze("itl_p99", bs, ss)
    assert "do not enable speculation" in verdict(a).sentence
    v = verdict(a, advises=False, worse_with_spec=BY_NAME["itl_p99"].spec.worse_with_spec)
    assert v.sentence == ("itl_p99: the baseline wins at every measured concurrency (C=1–16). Where speculation is "
                          "worse here: accepted drafts arrive as bursts, so the gap after a burst is a whole verify "
                          "step.")
    bs, ss = ladder_with({1: -0.1, 4: -0.1, 16: 0.1}, hib=False)
    x = analyze("itl_p50", bs, ss)
    assert verdict(x).sentence.startswith("itl_p50: enable speculation below C≈")
    assert verdict(x, advises=False).sentence.startswith("itl_p50: speculation is better below C≈")


def test_only_output_throughput_says_where_to_enable_speculation(doc):
    per = run_analysis(doc).to_dict()["workloads"]["freetext"]
    assert "enable" in per[DECIDES]["recommendation"] or "wins" in per[DECIDES]["recommendation"]
    for name, m in per.items():
        if name != DECIDES:
            assert "enable" not in m["recommendation"], (name, m["recommendation"])


def test_with_slos_goodput_decides(doc):
    """Run with --slo, the requests that met them are what the user buys: goodput's verdict advises, and the
    terminal's table is goodput's; output throughput then says where each target is better."""
    d = copy.deepcopy(doc)
    d["run"]["settings"] = {"slo": {"ttft_ms": 200.0, "itl_ms": None, "tpot_ms": None, "e2e_ms": None}}
    res = run_analysis(d).to_dict()
    assert res["decides"] == "goodput_requests_per_s" and run_analysis(doc).to_dict()["decides"] == DECIDES
    per = res["workloads"]["freetext"]
    assert "enable" not in per[DECIDES]["recommendation"]
    assert "workload freetext: goodput" in crossover_tables(RunAnalysis.from_dict(res))


# --------------------------------------------------------------------------- nothing comparable

def _all_cut(doc):
    d = copy.deepcopy(doc)
    for s in d["stages"]:
        s["incomplete"], s["cut"] = True, {"phase": "window", "at_s": 6.0, "by": "max-run-time"}
    return d


def _dead(doc):
    d = copy.deepcopy(doc)
    for s in d["stages"]:
        s["requests"].update(completed=0, failed=40)
        s["workloads"]["freetext"]["requests"].update(completed=0, failed=40)
    return d


def _unsteady_top_and_dead_spec(doc):
    """Every stage unusable for its own reason: the baseline's top stage unsteady, its others cut; the spec's dead."""
    d = _below_c(doc)
    for s in d["stages"]:
        if s["target"] == "spec":
            s["requests"].update(completed=0, failed=40)
            s["workloads"]["freetext"]["requests"].update(completed=0, failed=40)
        elif s["concurrency"] != 100:
            s["incomplete"], s["cut"] = True, {"phase": "warm-up", "at_s": 2.0, "by": "interrupt"}
    return d


@pytest.mark.parametrize("fault, line", [
    (_all_cut, "nothing compared: 8 of 8 stages cut in the window by --max-run-time"),
    (_dead, "nothing compared: 8 of 8 stages with no request completed (40 failed)"),
    (_unsteady_top_and_dead_spec, "nothing compared: 4 of 8 stages with no request completed (40 failed), 3 of 8 "
                                  "stages cut in the warm-up by an interrupt, 1 of 8 stages whose server ran fewer "
                                  "requests at once than C"),
])
def test_a_run_with_nothing_comparable_says_why_in_one_line_and_fails(doc, tmp_path, fault, line):
    """Bad input (issue 27): a dead server, every stage cut, or unsteady: one line, every stage kept, exit 1."""
    from tests.cli.runner import in_process
    from tests.report.synth import write_run

    out = write_run(tmp_path / "r", fault(doc))
    got = in_process("crossover", "--from", str(out), "--no-report")
    assert got.returncode == 1, got
    assert got.stdout == ""  # no table of dashes, no screen of flags
    errors = [x for x in got.stderr.splitlines() if "error" in x]
    assert errors == [f"loadgen: error: {line}"], got.stderr
    assert (out / "crossover.json").exists()  # the analysis is written all the same, with why per stage
    again = in_process("report", str(out), "--no-png")  # the report of such a run says the same, and is written
    assert again.returncode == 1 and again.stdout == "" and (out / "report.html").exists(), again
    assert [x for x in again.stderr.splitlines() if "error" in x] == [f"loadgen: error: {line}"]
    control = in_process("crossover", "--from", str(write_run(tmp_path / "ok", doc)), "--no-report")
    assert control.returncode == 0 and "workload freetext" in control.stdout


def test_the_terminal_shows_beside_a_win_only_the_latency_that_costs_and_why():
    """One screen: speculation's throughput win, and beside it the ITL p99 that is worse with speculation, said
    as what it shows and why, never "do not enable"; a latency that agrees, or that favours speculation where
    the deciding metric does not, stays in --verbose."""
    from loadgen.analysis.compare import MetricResult

    d = run_doc(ladder=(1, 4, 16), workloads=("code",), flags=False)  # code: speculation +60 % at every C
    res = run_analysis(d).to_dict()
    per = res["workloads"]["code"]
    assert per[DECIDES]["verdict"] == "spec"
    bs, ss = ladder_with({1: 0.2, 4: 0.25, 16: 0.3}, hib=False)
    a = analyze("itl_p99", bs, ss)
    v = verdict(a, advises=False, worse_with_spec=BY_NAME["itl_p99"].spec.worse_with_spec)
    per["itl_p99"] = MetricResult("ITL p99", "ms", a, v.sentence, v.kind, v.caveat, v.everywhere, v.text).to_dict()
    bs, ss = ladder_with({1: -0.2, 4: -0.2, 16: -0.2}, hib=False)  # ITL p50 better with speculation: agrees
    a = analyze("itl_p50", bs, ss)
    v = verdict(a, advises=False)
    per["itl_p50"] = MetricResult("ITL p50", "ms", a, v.sentence, v.kind, v.caveat, v.everywhere, v.text).to_dict()
    text = crossover_tables(RunAnalysis.from_dict(res))
    side = [line for line in text.splitlines() if line.startswith("  · ")]
    assert side == ["  · itl_p99: the baseline wins at every measured concurrency (C=1–16). Where speculation is worse "
                    "here: accepted drafts arrive as bursts, so the gap after a burst is a whole verify step."], text
    assert "do not enable" not in text and "ITL p50" not in text and "itl_p50" not in text
    assert "itl_p50" in crossover_tables(RunAnalysis.from_dict(res), verbose=True)
    # the deciding metric leaning to the baseline: a latency better with speculation is a rival verdict, not shown
    per[DECIDES]["verdict"] = "baseline"
    assert not [line for line in crossover_tables(RunAnalysis.from_dict(res)).splitlines() if line.startswith("  · ")]
