"""Repeated passes: each stage's spread across passes, and the flag for passes that differ beyond their windows."""

from __future__ import annotations

import random

import pytest

from loadgen.analysis.compare import PASSES_FLAG, RunAnalysis, run_analysis
from loadgen.analysis.repeats import PassSpread, Spread, chi2_upper, pass_spread
from tests.report import synth


def _windows(mean: float, n: int, cv: float, rng: random.Random) -> list[float]:
    return [mean * (1 + cv * rng.gauss(0.0, 1.0)) for _ in range(n)]


def test_chi2_quantiles_are_close_to_the_tables():
    # scipy.stats.chi2.ppf(q, k)
    for k, q, exact in ((1, 0.9, 2.7055), (4, 0.9, 7.7794), (4, 0.95, 9.4877), (9, 0.9, 14.6837)):
        assert chi2_upper(k, q) == pytest.approx(exact, rel=0.03)


def test_spread_is_the_passes_sample_cv():
    s = Spread((90.0, 100.0, 110.0))
    assert s.mean == 100.0 and s.sd == pytest.approx(10.0) and s.cv == pytest.approx(0.1)
    assert Spread((5.0,)).cv is None


def _per_pass(spec_means: list[float], cv: float = 0.02, n: int = 20, seed: int = 0):
    rng = random.Random(seed)
    return {"baseline": {4: {r: _windows(100.0, n, cv, rng) for r in range(len(spec_means))}},
            "spec": {4: {r: _windows(m, n, cv, rng) for r, m in enumerate(spec_means)}}}


def test_passes_that_agree_within_their_windows_are_not_flagged():
    p = pass_spread(_per_pass([120.0] * 5), "baseline", "spec", True, confidence=0.9)
    d = p.deltas[4]
    assert p.passes == 5 and len(d.deltas) == 5 and not d.beyond
    assert all(0.15 < x < 0.25 for x in d.deltas)
    # each target's figure per pass is the mean of that pass's windows
    per = _per_pass([120.0] * 5)
    assert p.by_target["spec"][4].values == pytest.approx([sum(xs) / len(xs) for _, xs in sorted(per["spec"][4].items())])
    assert p.beyond() == []


def test_passes_that_swing_beyond_their_windows_are_flagged():
    """Tight windows (2 % a window) but the speculative server's figure moves 20 % from pass to pass: each pass's
    interval is a few per cent wide, the passes scatter far more."""
    p = pass_spread(_per_pass([130.0, 100.0, 125.0, 95.0, 120.0]), "baseline", "spec", True, confidence=0.9)
    d = p.deltas[4]
    assert d.beyond and p.beyond() == [4]
    assert d.between_sd > 3 * d.within_se
    assert p.by_target["spec"][4].cv > 0.1 > p.by_target["baseline"][4].cv


def test_one_pass_gives_no_spread():
    assert pass_spread(_per_pass([120.0]), "baseline", "spec", True, confidence=0.9) is None


def _repeated_doc(spec_speedups: list[float], ladder=(1, 5)) -> dict:
    doc = synth.run_doc(ladder=ladder, workloads=("chat",), flags=False)
    stages = []
    for r, speedup in enumerate(spec_speedups):
        for c in ladder:
            for target in ("baseline", "spec"):
                d = synth.stage(target, "chat", c, len(stages), seed=r, speedup=speedup if target == "spec" else 1.0)
                d["repeat"] = r
                stages.append(d)
    doc["stages"] = stages
    return doc


def test_a_repeated_run_gives_each_stage_its_cv_and_flags_passes_that_disagree():
    steady = run_analysis(_repeated_doc([1.0, 1.0, 1.0, 1.0]))
    res = steady.workloads["chat"]["output_tokens_per_s"]
    assert res.passes is not None and res.passes.passes == 4
    assert set(res.passes.by_target) == {"baseline", "spec"} and set(res.passes.by_target["spec"]) == {1, 5}
    assert all(len(s.values) == 4 for per in res.passes.by_target.values() for s in per.values())
    assert not any(PASSES_FLAG in f for fs in steady.coverage["chat"].flagged.values() for f in fs)

    swinging = run_analysis(_repeated_doc([1.4, 0.8, 1.35, 0.75]))
    res = swinging.workloads["chat"]["output_tokens_per_s"]
    assert res.passes.beyond() == [1, 5]
    flags = swinging.coverage["chat"].flagged
    assert all(any(PASSES_FLAG in f for f in flags[c]) for c in (1, 5))
    assert PASSES_FLAG in res.recommendation  # the verdict names what it rests on
    # the pooled comparison still uses every pass's windows
    st = res.analysis.comparisons[0]
    assert st.n_baseline == 4 * len(synth.stage("baseline", "chat", 1, 0)["timeline"]["tokens"])

    back = RunAnalysis.from_dict(swinging.to_dict()).workloads["chat"]["output_tokens_per_s"].passes
    assert isinstance(back, PassSpread) and back.to_dict() == res.passes.to_dict()


def test_a_run_without_repeats_has_no_passes():
    ra = run_analysis(synth.run_doc(ladder=(1, 5), workloads=("chat",), flags=False))
    assert ra.workloads["chat"]["output_tokens_per_s"].passes is None
    assert "passes" not in ra.to_dict()["workloads"]["chat"]["output_tokens_per_s"]
