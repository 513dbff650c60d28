"""A phase-shifting workload's slices rest only on their phase's own bins, past the transition margin, in the
analysis and in the report's slices alike; any other run's slices are untouched."""

from __future__ import annotations

from loadgen.analysis.compare import _slices, phase_bins, run_schedules, slice_timeline, stage_schedule
from loadgen.report.inputs import slices

SPEC = "phases:predictable@4s,freetext@4s"


def _stage(target: str, e2e_p99_ms: float, bins: int = 16, bin_s: float = 1.0) -> dict:
    """A stage whose per-workload tokens mark their bin (predictable 100 + i, freetext 200 + i) in every bin, so a
    kept bin's value tells which one it was."""
    def tl(base: int) -> dict:
        return {"bin_s": bin_s, "tokens": [base + i for i in range(bins)], "completed": [1] * bins,
                "ttft_hdr": [""] * bins}

    return {"target": target, "concurrency": 8, "requests": {"completed": 10, "failed": 0}, "incomplete": False,
            "cut": None, "window": {"start_ns": 0, "end_ns": int(bins * bin_s * 1e9), "duration_s": bins * bin_s},
            "e2e": {"count": 10, "p50": 900.0, "p99": e2e_p99_ms, "max": 2 * e2e_p99_ms},
            "timeline": tl(0), "output_tokens_per_s": 1.0, "client": {"client_bound": False, "reasons": []},
            "notes": [],
            "workloads": {"predictable": {"requests": {}, "output_tokens_per_s": 1.0, "timeline": tl(100)},
                          "freetext": {"requests": {}, "output_tokens_per_s": 1.0, "timeline": tl(200)}}}


def _doc(*stages: dict, workloads=(SPEC,)) -> dict:
    return {"run": {"workloads": list(workloads), "ladder": [8]}, "stages": list(stages)}


def test_each_phase_keeps_only_its_own_bins_past_the_margin() -> None:
    s = _stage("baseline", e2e_p99_ms=1500)
    doc = _doc(s)
    sched = stage_schedule(s, run_schedules(doc))
    assert sched is not None and sched.spec == SPEC
    # predictable runs [0,4) and [8,12), freetext [4,8) and [12,16); each phase after the window's first waits
    # out the stage's E2E p99 (1.5 s): the first needs none, the warm-up ran it
    assert phase_bins(s, "predictable", sched) == [0, 1, 2, 3, 10, 11]
    assert phase_bins(s, "freetext", sched) == [6, 7, 14, 15]
    tl = slice_timeline(s, "freetext", run_schedules(doc))
    assert tl["tokens"] == [206, 207, 214, 215] and tl["completed"] == [1] * 4 and tl["ttft_hdr"] == [""] * 4
    assert tl["bin_s"] == 1.0
    assert slice_timeline(s, "all", run_schedules(doc)) is s["timeline"]  # the alternating load as a whole
    got = _slices(doc)
    assert [tl["tokens"] for _, tl in got[("baseline", "predictable", 8)]] == [[100, 101, 102, 103, 110, 111]]
    assert len(got[("baseline", "all", 8)][0][1]["tokens"]) == 16


def test_the_margin_is_the_previous_phase_workloads_e2e() -> None:
    """Short predictable requests clear out fast, long freetext ones slowly: each phase waits for its predecessor's."""
    s = _stage("baseline", e2e_p99_ms=1500)
    s["workloads"]["predictable"]["e2e"] = {"p99": 500.0}
    s["workloads"]["freetext"]["e2e"] = {"p99": 3000.0}
    sched = stage_schedule(s, run_schedules(_doc(s)))
    assert phase_bins(s, "predictable", sched) == [0, 1, 2, 3, 11]  # [8,12) after freetext: from 11 s
    assert phase_bins(s, "freetext", sched) == [5, 6, 7, 13, 14, 15]  # after predictable: from 4.5 and 12.5 s


def test_bins_that_straddle_a_phase_edge_are_left_out() -> None:
    s = _stage("spec", e2e_p99_ms=300, bins=10, bin_s=1.6)  # 16 s in 1.6 s bins; edges at 4, 8, 12
    sched = stage_schedule(s, run_schedules(_doc(s)))
    # predictable [0,4): bins [0,1.6),[1.6,3.2); [8,12) from 8.3: [9.6,11.2) only
    assert phase_bins(s, "predictable", sched) == [0, 1, 6]
    # freetext [4.3,8): [4.8,6.4), [6.4,8.0); [12.3,16): [12.8,14.4), [14.4,16.0)
    assert phase_bins(s, "freetext", sched) == [3, 4, 8, 9]


def test_the_report_slices_rest_on_the_same_bins() -> None:
    s = _stage("baseline", e2e_p99_ms=1500)
    sl = slices(_doc(s))["freetext"]["baseline"][8]
    assert sl.rate_bins == [206.0, 207.0, 214.0, 215.0]
    assert sl.bins("output_tokens_per_s") == sl.rate_bins


def test_a_run_without_phases_is_untouched() -> None:
    s = _stage("baseline", e2e_p99_ms=1500)
    for doc in (_doc(s, workloads=("predictable,freetext",)), _doc(s, workloads=())):
        assert stage_schedule(s, run_schedules(doc)) is None
        assert slice_timeline(s, "freetext", run_schedules(doc)) is s["workloads"]["freetext"]["timeline"]
        assert len(slices(doc)["freetext"]["baseline"][8].rate_bins) == 16
