"""analysis.serverview: what the servers ran per stage, and crossovers mapped to the measured running batch.

Stage dicts are hand-made here (the shape loadgen.serverview writes, docs/metrics.md) so that cases a
simulator run does not produce — a server whose running batch stays below C, a page without gauges,
no /metrics at all, pooled repeats — are exact; tests/report/test_serverview.py runs the real simulator.
"""

import orjson
import pytest

from loadgen.analysis.compare import DECIDES, MetricResult, RunAnalysis
from loadgen.analysis.results import Crossover, MetricAnalysis
from loadgen.analysis.serverview import NO_BLOCK, ServerView, batch_at, server_view


def gauge(mean, p50=None, mx=None, n=6):
    return {"mean": mean, "p50": mean if p50 is None else p50, "min": 0, "max": mean if mx is None else mx, "n": n}


def block(c, running=None, queued=0.0, verdict=None, cap=None, engine="sglang", tokens=(100, 100), **extra):
    """An available server block at concurrency c; ``running``: the gauge's mean (None: no running gauge)."""
    gauges = {"queued": gauge(queued), "kv_usage": gauge(0.25)}
    checks = {"tokens": {"verdict": "agree" if tokens[0] == tokens[1] else "disagree", "client": tokens[0],
                         "server": tokens[1], "diff_pct": round(100 * (tokens[0] - tokens[1]) / tokens[1], 3)}}
    if running is not None:
        gauges["running"] = gauge(running) if not isinstance(running, dict) else running
        checks["running"] = {"verdict": verdict or "runs C", "concurrency": c, "cap": cap}
    else:
        checks["running"] = {"verdict": "not measured", "concurrency": c}
    return {"available": True, "engine": engine, "gauges": gauges, "checks": checks, "notes": [],
            "output_tokens": tokens[1], **extra}


def stage(target, c, server, wl="chat", incomplete=False):
    return {"target": target, "concurrency": c, "workloads": {wl: {}}, "server": server, "incomplete": incomplete,
            "cut": {"phase": "window"} if incomplete else None}


def ra_with(*crossovers, wl="chat") -> RunAnalysis:
    """A run's analysis holding only the given output-throughput crossovers (estimate, low, high, direction)."""
    xs = [Crossover(0, 0, e, lo, hi, d, 0.9, 0.9) for e, lo, hi, d in crossovers]
    m = MetricResult("output throughput", "tok/s", MetricAnalysis(DECIDES, True, 0.9, 0.01, False, [], [], xs),
                     "", "", "", False)
    return RunAnalysis("baseline", "spec", 0.9, {wl: {DECIDES: m}}, {})


def view_of(doc, *crossovers, wl="chat") -> ServerView:
    ra = ra_with(*crossovers, wl=wl)
    return server_view(doc, ra.baseline, ra.spec, ra.crossovers(DECIDES))


def doc_of(*stages):
    return {"schema": "loadgen.run/1", "run": {}, "stages": list(stages)}


def test_rows_carry_the_measured_figures_and_skip_cut_stages():
    doc = doc_of(
        stage("baseline", 4, block(4, 4.0)),
        stage("spec", 4, block(4, 3.9, queued=0.5, mean_accept_length=2.4, accept_rate=0.7,
                               acceptance_per_position=[0.8, 0.6], tokens=(1000, 1003))),
        stage("spec", 16, block(16, 40.0)),  # incomplete: left out like everywhere in the analysis
        stage("spec", 16, block(16, 15.0), incomplete=True))
    doc["stages"].pop(2)
    v = view_of(doc)
    (b4,), (s4,) = v.rows["chat"]["baseline"], v.rows["chat"]["spec"]
    assert (b4.concurrency, b4.running_mean, b4.running_p50) == (4, 4.0, 4.0)
    assert (s4.running_mean, s4.queued_mean, s4.kv_usage_mean) == (3.9, 0.5, 0.25)
    assert (s4.mean_accept_length, s4.accept_rate, s4.acceptance_per_position) == (2.4, 0.7, [0.8, 0.6])
    assert [(t.verdict, t.client, t.server, t.diff_pct) for t in s4.tokens] == [("disagree", 1000, 1003, -0.299)]
    assert v.engine == {"baseline": "sglang", "spec": "sglang"} and v.unavailable == {}


def test_repeated_stages_pool_gauges_by_snapshot_count_and_acceptance_by_counters():
    a = block(8, gauge(6.0, n=2), drafts=100, accepted_tokens=120, draft_tokens=300,
              accepted_per_position=[70, 50, 0], acceptance_per_position=[0.7, 0.5, 0.0], tokens=(500, 500))
    b = block(8, gauge(8.0, n=6), drafts=300, accepted_tokens=240, draft_tokens=900,
              accepted_per_position=[150, 90, 0], acceptance_per_position=[0.5, 0.3, 0.0], tokens=(900, 901))
    v = view_of(doc_of(stage("spec", 8, a), stage("spec", 8, b)))
    (r,) = v.rows["chat"]["spec"]
    assert r.stages == 2 and r.running_mean == pytest.approx((6 * 2 + 8 * 6) / 8)
    assert r.running_p50 == 7.0  # the median of the two windows' medians
    assert r.mean_accept_length == pytest.approx(1 + 360 / 400) and r.accept_rate == pytest.approx(360 / 1200)
    assert r.acceptance_per_position == [0.55, 0.35, 0.0]  # (70+150)/400, (50+90)/400
    assert [t.verdict for t in r.tokens] == ["agree", "disagree"]


def test_crossover_maps_linearly_in_c_between_measured_stages():
    rows = view_of(doc_of(stage("spec", 4, block(4, 4.0)), stage("spec", 16, block(16, 12.0)),
                          stage("spec", 64, block(64, 48.0, verdict="capped", cap=48)))).rows
    spec = rows["chat"]["spec"]
    b = batch_at(spec, 10.0)
    assert (b.running, b.below, b.above, b.at_cap) == (8.0, 4, 16, False)  # 4 + (10-4)/(16-4)·(12-4)
    assert batch_at(spec, 16.0).running == 12.0 and batch_at(spec, 16.0).below == 16
    assert batch_at(spec, 40.0).running == pytest.approx(30.0)
    low, high = batch_at(spec, 2.0), batch_at(spec, 100.0)
    assert low.running is None and "outside the stages with a running batch (C=4–64)" in low.why
    assert high.running is None and high.why.startswith("not measured")


def test_a_server_that_runs_below_c_gives_its_batch_not_c():
    """C=32 kept open, the server ran ~9.5 at once (prefill interleaving, a small KV pool): the threshold says 9.5."""
    doc = doc_of(stage("spec", 8, block(8, 7.8)), stage("spec", 32, block(32, 9.5, queued=22.0, verdict="below C")))
    v = view_of(doc, (32.0, 8.0, 32.0, "spec_to_baseline"))
    (t,) = v.thresholds["chat"]
    assert t.estimate.running == 9.5 and t.low.running == 7.8 and t.high.running == 9.5
    assert t.estimate.c == 32.0 and not t.estimate.at_cap
    assert v.rows["chat"]["spec"][1].running_verdict == "below C" and v.rows["chat"]["spec"][1].queued_mean == 22.0


def test_at_the_cap_is_flagged_only_between_capped_stages():
    doc = doc_of(stage("spec", 16, block(16, 16.0)),
                 *(stage("spec", c, block(c, 48.0, queued=c - 48, verdict="capped", cap=48)) for c in (64, 128)))
    v = view_of(doc, (90.0, 70.0, 120.0, "baseline_to_spec"), (30.0, 20.0, 40.0, "spec_to_baseline"))
    lo, hi = v.thresholds["chat"]  # sorted by estimate
    assert (lo.estimate.c, lo.estimate.at_cap) == (30.0, False)
    assert (hi.estimate.c, hi.estimate.at_cap, hi.estimate.cap, hi.estimate.running) == (90.0, True, 48, 48.0)


def test_no_metrics_says_why_and_carries_no_figure():
    off = {"available": False, "reason": "http://127.0.0.1:9/metrics: HTTP 404", "url": "http://127.0.0.1:9/metrics"}
    doc = doc_of(stage("baseline", 4, block(4, 4.0)), stage("spec", 4, off), stage("spec", 16, dict(off)))
    v = view_of(doc, (8.0, 5.0, 12.0, "spec_to_baseline"))
    assert v.unavailable == {"spec": off["reason"]} and v.engine["spec"] == ""
    assert all(not r.available and r.running_mean is None and r.reason == off["reason"] for r in v.rows["chat"]["spec"])
    (t,) = v.thresholds["chat"]
    for b in (t.estimate, t.low, t.high):
        assert b.running is None and b.why == f"not measured: {off['reason']}"


def test_no_running_gauge_or_no_block_is_not_measured_not_c():
    v = view_of(doc_of(stage("spec", 4, block(4, None)), stage("spec", 16, block(16, None))),
                (8.0, 5.0, 12.0, "spec_to_baseline"))
    assert v.thresholds["chat"][0].estimate.running is None
    assert "no running-requests gauge" in v.thresholds["chat"][0].estimate.why
    old = doc_of(stage("spec", 4, None), stage("baseline", 4, None))
    for s in old["stages"]:
        del s["server"]
    v = view_of(old, (8.0, 5.0, 12.0, "spec_to_baseline"))
    assert v.unavailable == {"baseline": NO_BLOCK, "spec": NO_BLOCK}


def test_llamacpp_busy_slots_and_foreign_blocks():
    lc = block(4, 3.0, engine="llama.cpp", mean_busy_per_step=2.75)
    junk = {"available": True, "gauges": "x", "checks": [1], "notes": "n"}
    doc = doc_of(stage("spec", 4, lc), stage("spec", 8, junk), {"target": "spec"}, "not a stage")
    v = view_of(doc)
    r4, r8 = v.rows["chat"]["spec"]
    assert (r4.engine, r4.busy_per_step, r4.running_mean) == ("llama.cpp", 2.75, 3.0)
    assert r8.available and r8.running_mean is None and r8.running_verdict == "not measured"


def test_round_trip_through_json():
    doc = doc_of(stage("spec", 4, block(4, 4.0, acceptance_per_position=[0.5])), stage("spec", 16, block(16, 15.0)))
    v = view_of(doc, (8.0, 5.0, 40.0, "spec_to_baseline"))
    back = ServerView.from_dict(orjson.loads(orjson.dumps(v.to_dict())))
    assert back == v and back.thresholds["chat"][0].high.running is None
