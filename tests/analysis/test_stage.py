"""compare_stage: the difference at one concurrency, its interval and verdict."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from loadgen.analysis.crossover import StageSamples, analyze, compare_stage
from tests.analysis.synth import LADDER, windows


def pair(c, base, spec, hib=True):
    return StageSamples(c, list(base), hib), StageSamples(c, list(spec), hib)


def test_delta_is_relative_difference_of_means():
    b, s = pair(10, [100, 102, 98, 100], [110, 112, 108, 110])
    cmp = compare_stage(b, s)
    assert cmp.delta == pytest.approx(0.10)
    assert cmp.mean_baseline == pytest.approx(100)
    assert cmp.mean_spec == pytest.approx(110)
    assert cmp.ci_low < 0.10 < cmp.ci_high
    assert cmp.verdict == "spec"


def test_lower_is_better_flips_the_verdict():
    b, s = pair(10, [100, 102, 98, 100], [110, 112, 108, 110], hib=False)
    assert compare_stage(b, s).verdict == "baseline"
    b, s = pair(10, [110, 112, 108, 110], [100, 102, 98, 100], hib=False)
    assert compare_stage(b, s).verdict == "spec"


def test_practical_margin_makes_small_significant_differences_a_tie():
    b, s = pair(5, [100.0, 100.1, 99.9, 100.0, 100.05, 99.95], [100.5, 100.6, 100.4, 100.5, 100.55, 100.45])
    cmp = compare_stage(b, s)
    assert cmp.ci_low > 0  # clearly different ...
    assert cmp.verdict == "tie"  # ... but by 0.5 %, under the 1 % margin
    assert compare_stage(b, s, margin=0.001).verdict == "spec"


def test_overlapping_noise_is_a_tie():
    b, s = pair(5, [100, 110, 90, 105, 95], [101, 111, 89, 104, 96])
    cmp = compare_stage(b, s)
    assert cmp.ci_low < 0 < cmp.ci_high
    assert cmp.verdict == "tie"


def test_reproducible_with_fixed_seed_and_seed_matters():
    r = random.Random(3)
    b = StageSamples(30, windows(700, 0.03, 12, 0.3, r), True)
    s = StageSamples(30, windows(720, 0.03, 12, 0.3, r), True)
    one, two = compare_stage(b, s), compare_stage(b, s)
    assert dataclasses.asdict(one) == dataclasses.asdict(two)
    other = compare_stage(b, s, seed=1)
    assert other.delta == one.delta
    assert other.ci_low != one.ci_low


def test_different_sample_counts_are_fine():
    r = random.Random(4)
    b = StageSamples(2, windows(150, 0.03, 5, 0.0, r), True)
    s = StageSamples(2, windows(140, 0.03, 17, 0.0, r), True)
    cmp = compare_stage(b, s)
    assert (cmp.n_baseline, cmp.n_spec) == (5, 17)
    assert cmp.ci_low < cmp.delta < cmp.ci_high


def test_too_few_samples_or_zero_mean_is_an_explained_tie():
    b, s = pair(1, [100.0], [120.0, 121.0])
    cmp = compare_stage(b, s)
    assert cmp.verdict == "tie" and cmp.ci_low is None and "too few" in cmp.note
    assert cmp.delta == pytest.approx(0.205)
    b, s = pair(250, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    cmp = compare_stage(b, s)
    assert cmp.verdict == "tie" and cmp.delta is None and "zero" in cmp.note
    json.dumps(dataclasses.asdict(cmp))


def test_constant_samples_give_a_zero_width_interval():
    b, s = pair(7, [100.0] * 6, [105.0] * 6)
    cmp = compare_stage(b, s)
    assert cmp.ci_low == pytest.approx(0.05) and cmp.ci_high == pytest.approx(0.05)
    assert cmp.verdict == "spec"


@pytest.mark.parametrize(
    "base, spec, message",
    [
        (StageSamples(1, [1.0, 2.0], True), StageSamples(2, [1.0, 2.0], True), "concurrency mismatch"),
        (StageSamples(1, [1.0, 2.0], True), StageSamples(1, [1.0, 2.0], False), "higher_is_better"),
        (StageSamples(1, [1.0, -2.0], True), StageSamples(1, [1.0, 2.0], True), "finite value >= 0"),
        (StageSamples(1, [1.0, float("nan")], True), StageSamples(1, [1.0, 2.0], True), "finite value >= 0"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(base, spec, message):
    with pytest.raises(ValueError, match=message):
        compare_stage(base, spec)


def test_serializable():
    r = random.Random(5)
    b = StageSamples(10, windows(400, 0.03, 10, 0.3, r), True)
    s = StageSamples(10, windows(420, 0.03, 10, 0.3, r), True)
    d = dataclasses.asdict(compare_stage(b, s))
    assert json.loads(json.dumps(d, allow_nan=False)) == d


# --------------------------------------------------------------------------- coverage

SCENARIOS = [
    # (label, n_baseline, n_spec, lag-1 correlation, window CV, seeds)
    ("independent windows, n=10", 10, 10, 0.0, 0.03, 40),
    ("AR(1) 0.3, n=15", 15, 15, 0.3, 0.04, 40),
    ("AR(1) 0.5, n=20", 20, 20, 0.5, 0.03, 40),
    ("AR(1) 0.3, n=8 vs 16", 8, 16, 0.3, 0.03, 40),
    ("4 repetitions (independent)", 4, 4, 0.0, 0.03, 40),
]


@pytest.mark.parametrize("label, nb, ns, phi, cv, seeds", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_stage_interval_coverage(label, nb, ns, phi, cv, seeds, measured):
    """Nominal 90 % intervals of delta cover the true delta in about 90 % of stages."""
    true_delta = {c: 0.08 * (1 if i % 2 else -1) * (i % 3) / 2 for i, c in enumerate(LADDER)}
    hits = total = 0
    for seed in range(seeds):
        r = random.Random(seed)
        bs = [StageSamples(c, windows(100 + 3 * c, cv, nb, phi, r), True) for c in LADDER]
        ss = [StageSamples(c, windows((100 + 3 * c) * (1 + true_delta[c]), cv, ns, phi, r), True) for c in LADDER]
        for cmp in analyze("m", bs, ss, seed=seed, n_boot=1000).comparisons:
            hits += cmp.ci_low <= true_delta[cmp.concurrency] <= cmp.ci_high
            total += 1
    coverage = hits / total
    measured(f"stage delta, nominal 90 %, {label}: covered {hits}/{total} = {coverage:.1%}")
    assert 0.85 <= coverage <= 0.97, coverage


def test_stage_interval_coverage_standalone(measured):
    """compare_stage on its own estimates the correlation from its two series only."""
    hits = total = 0
    for seed in range(200):
        r = random.Random(seed)
        b = StageSamples(10, windows(500, 0.03, 15, 0.3, r), True)
        s = StageSamples(10, windows(525, 0.03, 15, 0.3, r), True)
        cmp = compare_stage(b, s, seed=seed, n_boot=1000)
        hits += cmp.ci_low <= 0.05 <= cmp.ci_high
        total += 1
    coverage = hits / total
    measured(f"stage delta, nominal 90 %, standalone compare_stage, AR(1) 0.3, n=15: {coverage:.1%}")
    assert 0.85 <= coverage <= 0.97, coverage
