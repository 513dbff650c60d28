"""A load point's ending (loadgen.analysis.sequential) on given samples and given intervals: decided, a tie within
the margin, open with how much more it needs, or not compared; the level each planned look takes."""

import math
import random

import pytest

from loadgen.analysis.comparison import compare_stage
from loadgen.analysis.results import TIE, StageComparison, StageSamples
from loadgen.analysis.sequential import DECIDED, NOT_COMPARED, OPEN, TIED, ending, look_level, more_needed
from loadgen.cli import main


def _cmp(delta, lo, hi, verdict=TIE, tie=0.05, wide=None):
    if wide is None:
        wide = lo is None or lo < -tie or hi > tie
    return StageComparison(10, True, 8, 8, 100.0, 100.0 * (1 + (delta or 0.0)), delta, lo, hi, 0.9, 0.01, verdict,
                           tie_margin=tie, wide=wide)


def test_each_look_takes_its_share_of_alpha():
    assert look_level(0.90, 1) == pytest.approx(0.90)
    assert look_level(0.90, 4) == pytest.approx(0.975)
    assert look_level(0.95, 5) == pytest.approx(0.99)
    with pytest.raises(ValueError):
        look_level(0.9, 0)


def test_the_ending_of_given_intervals():
    assert ending(_cmp(0.08, 0.03, 0.13, verdict="spec")).kind == DECIDED
    assert ending(_cmp(0.08, 0.03, 0.13, verdict="spec")).winner == "spec"
    assert ending(_cmp(0.004, -0.02, 0.03)).kind == TIED
    e = ending(_cmp(0.01, -0.04, 0.07))
    assert e.kind == OPEN and e.more is not None and e.more > 1
    assert ending(_cmp(None, None, None)).kind == NOT_COMPARED
    assert ending(_cmp(0.004, -0.02, 0.03)).words(0.05) == "tie within ±5 %"
    assert ending(_cmp(0.004, -0.02, 0.03, tie=0.02)).kind == OPEN  # the same interval, a tighter margin


def test_how_much_more_an_open_point_needs():
    # Δ = 0, half-width h on the log scale: a tie needs h below log(1.05), so (h / log 1.05)² times the windows
    lo, hi = math.expm1(-0.1), math.expm1(0.1)
    assert more_needed(_cmp(0.0, lo, hi)) == pytest.approx((0.1 / math.log1p(0.05)) ** 2)
    # Δ = +4 %: deciding (h < log 1.04) is easier than a tie (h < log 1.05 − log 1.04)
    c = _cmp(0.04, math.expm1(math.log1p(0.04) - 0.1), math.expm1(math.log1p(0.04) + 0.1))
    assert more_needed(c) == pytest.approx((0.1 / math.log1p(0.04)) ** 2)


def _samples(mean, sd, n, seed):
    r = random.Random(seed)
    return [mean + r.gauss(0, sd) for _ in range(n)]


def test_the_ending_of_given_samples():
    far = compare_stage(StageSamples(10, _samples(1000, 10, 8, 1), True), StageSamples(10, _samples(1100, 10, 8, 2), True))
    assert ending(far).kind == DECIDED and ending(far).winner == "spec"
    same = compare_stage(StageSamples(10, _samples(1000, 5, 16, 3), True), StageSamples(10, _samples(1000, 5, 16, 4), True))
    assert ending(same).kind == TIED
    noisy = compare_stage(StageSamples(10, _samples(1000, 150, 4, 5), True), StageSamples(10, _samples(1000, 150, 4, 6), True))
    assert ending(noisy).kind == OPEN and ending(noisy).more > 1
    # a later look at the sequential level is wider than one look at the run's level: it may stay open
    tight = compare_stage(StageSamples(10, _samples(1000, 20, 8, 7), True), StageSamples(10, _samples(1030, 20, 8, 8), True))
    wider = compare_stage(StageSamples(10, _samples(1000, 20, 8, 7), True), StageSamples(10, _samples(1030, 20, 8, 8), True),
                          confidence=look_level(0.9, 4))
    assert wider.ci_high - wider.ci_low > tight.ci_high - tight.ci_low


def test_the_stopping_bench_prints_every_delta_and_refuses_bad_input(capsys):
    assert main(["bench", "stopping", "--comparisons", "2", "--looks", "2", "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    deltas = ["+0", "+1", "-1", "+2", "-2", "+5", "-5", "+20", "-20"]
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in deltas]
    assert [r[0] for r in rows] == deltas * 3  # one pass, sequential, every pass
    for i, r in enumerate(rows):
        right, wrong, tie, false_tie, open_, secs = (float(x) for x in r[1:7])
        assert right + wrong + tie + open_ == pytest.approx(100.0) and false_tie <= tie
        # one pass runs 4 windows of 2 s; every pass runs both; the sequential design stops in between
        assert secs == (8.0 if i < 9 else 16.0) if i < 9 or i >= 18 else 8.0 <= secs <= 16.0
    assert main(["bench", "stopping", "--tie", "0.8"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
