"""analyze / refine_plan / recommendation: contracts, serialization, edge cases."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from loadgen.analysis.crossover import (
    Crossover,
    MetricAnalysis,
    StageComparison,
    StageSamples,
    analyze,
    find_crossovers,
    recommendation,
    refine_plan,
)
from tests.analysis import synth
from tests.analysis.synth import LADDER, run_ladder


def ladder_with(deltas, n=12, cv=0.01, seed=0, hib=True):
    r = random.Random(seed)
    bs = [StageSamples(c, [100 * (1 + cv * r.gauss(0, 1)) for _ in range(n)], hib) for c in deltas]
    ss = [StageSamples(c, [100 * (1 + d) * (1 + cv * r.gauss(0, 1)) for _ in range(n)], hib) for c, d in deltas.items()]
    return bs, ss


def test_analysis_is_json_serializable_and_deterministic():
    base, spec = synth.table_curves()
    a = run_ladder(base, spec, 0, refine=False)
    b = run_ladder(base, spec, 0, refine=False)
    d = dataclasses.asdict(a)
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text) == d
    assert d == dataclasses.asdict(b)
    assert len(text) < 20_000  # bootstrap replicates are not in it


def test_crossovers_from_comparisons_rebuilt_from_json():
    """A report re-reading results.json can still place crossovers (normal approximation)."""
    base, spec = synth.table_curves()
    a = run_ladder(base, spec, 1, refine=False)
    rebuilt = [StageComparison(**c) for c in json.loads(json.dumps(dataclasses.asdict(a)))["comparisons"]]
    (x,) = find_crossovers(rebuilt)
    (y,) = a.crossovers
    assert (x.low_c, x.high_c, x.direction) == (y.low_c, y.high_c, y.direction)
    assert x.estimate == pytest.approx(y.estimate, rel=0.02)
    assert x.ci_low == pytest.approx(y.ci_low, rel=0.15) and x.ci_high == pytest.approx(y.ci_high, rel=0.15)


def test_mapping_input_and_unpaired_stages():
    bs, ss = ladder_with({1: -0.1, 10: -0.1, 100: 0.1})
    extra = StageSamples(250, [1.0, 2.0, 3.0], True)
    a = analyze("tput", {s.concurrency: s for s in bs + [extra]}, ss)
    assert [c.concurrency for c in a.comparisons] == [1, 10, 100]
    assert a.unpaired == [250]
    assert len(a.crossovers) == 1


def test_analyze_rejects_inconsistent_input():
    bs, ss = ladder_with({1: 0.0, 2: 0.0})
    with pytest.raises(ValueError, match="share no concurrency"):
        analyze("m", bs[:1], ss[1:])
    with pytest.raises(ValueError, match="two stages at C=1"):
        analyze("m", [bs[0], bs[0]], ss)
    mixed = [bs[0], dataclasses.replace(bs[1], higher_is_better=False)]
    with pytest.raises(ValueError, match="higher_is_better"):
        analyze("m", mixed, [ss[0], dataclasses.replace(ss[1], higher_is_better=False)])


def test_truncated_stage_is_reported_as_an_explained_tie():
    bs, ss = ladder_with({1: -0.1, 10: -0.1, 30: 0.1, 100: 0.1})
    ss[1] = StageSamples(10, ss[1].samples[:1], True)  # the spec run died early at C=10
    a = analyze("tput", bs, ss)
    c10 = a.comparisons[1]
    assert c10.verdict == "tie" and c10.ci_low is None and "too few" in c10.note
    (x,) = a.crossovers
    assert (x.low_c, x.high_c) == (1, 30)  # the crossover skips the unusable stage
    json.dumps(dataclasses.asdict(a), allow_nan=False)


def test_refinement_stages_never_declare_a_crossover():
    deltas = {1: 0.1, 10: 0.1, 100: 0.1}
    bs, ss = ladder_with(deltas)
    rb, rs = ladder_with({30: -0.1}, seed=5)
    a = analyze("tput", bs + rb, ss + rs, ladder=[1, 10, 100])
    assert not a.crossovers  # C=30 was not planned: it cannot create two crossovers
    b = analyze("tput", bs + rb, ss + rs)
    assert len(b.crossovers) == 2


def test_refine_plan_bisects_on_log_concurrency_and_respects_the_budget():
    base, spec = synth.table_curves()
    a = run_ladder(base, spec, 2, refine=False)
    (x,) = a.crossovers
    assert (x.local_low_c, x.local_high_c) == (10, 30)
    assert refine_plan(a) == [17]  # round(sqrt(10 * 30))
    assert refine_plan(a, budget_stages=0) == []
    assert refine_plan(a, max_width_ratio=1000.0) == []
    assert refine_plan(a) == refine_plan(a)  # pure


def test_refine_plan_stops_when_nothing_fits_between_stages():
    x = Crossover(1, 2, 1.4, 1.2, 1.7, "spec_to_baseline", 0.9, 0.99, span=[1, 2], local_low_c=1, local_high_c=2)
    a = MetricAnalysis("m", True, 0.9, 0.01, True, [], [], [x])
    assert refine_plan(a) == []


def test_refine_plan_handles_several_crossovers():
    base, spec = synth.TWO_CROSSOVERS
    a = run_ladder(base, spec, 0, refine=False)
    assert len(a.crossovers) == 2
    plan = refine_plan(a, budget_stages=4)
    assert len(plan) == 2
    assert plan[0] < 10 < 70 < plan[1]
    assert len(refine_plan(a, budget_stages=1)) == 1


def test_refinement_terminates_and_narrows(measured):
    base, spec = synth.table_curves()
    coarse = run_ladder(base, spec, 3, refine=False).crossovers[0]
    fine_a = run_ladder(base, spec, 3, budget=12)
    fine = fine_a.crossovers[0]
    added = len(fine_a.comparisons) - len(LADDER)
    measured(
        f"refinement example: interval {coarse.ci_low:.1f}-{coarse.ci_high:.1f} -> {fine.ci_low:.1f}-{fine.ci_high:.1f} "
        f"with {added} extra stages"
    )
    assert fine.ci_high / fine.ci_low < coarse.ci_high / coarse.ci_low
    assert 0 < added <= 12


def test_recommendation_wording():
    bs, ss = ladder_with({1: 0.1, 2: 0.1, 5: 0.1, 10: -0.1, 30: -0.1})
    text = recommendation(analyze("Output throughput", bs, ss))
    assert text.startswith("Output throughput: enable speculation below C≈")
    assert "90 % interval" in text and "above it the baseline is better" in text
    bs, ss = ladder_with({1: 0.1, 250: 0.05})
    assert recommendation(analyze("m", bs, ss)) == "m: speculation wins at every measured concurrency (C=1–250); no crossover."
    bs, ss = ladder_with({1: -0.1, 250: -0.05})
    assert "baseline wins at every measured concurrency (C=1–250)" in recommendation(analyze("m", bs, ss))
    bs, ss = ladder_with({1: -0.1, 10: 0.0, 100: -0.1}, hib=False)
    assert "speculation is better at C=1, C=100 and tied elsewhere" in recommendation(analyze("ITL p99", bs, ss))


def test_candidate_only_recommendation():
    """A change of winner that per-stage intervals show but the ladder-wide ones do not."""
    found = None
    for seed in range(200):
        bs, ss = ladder_with({c: (-0.02 if c < 20 else 0.02) for c in LADDER}, n=10, cv=0.03, seed=seed)
        a = analyze("m", bs, ss, n_boot=500)
        if a.candidates and not a.crossovers:
            found = a
            break
    assert found is not None
    text = recommendation(found)
    assert "no crossover confirmed" in text and "seems to change near" in text
    assert all(not x.confirmed for x in found.candidates)
