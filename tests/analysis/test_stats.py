"""Unit tests of the small statistics helpers in loadgen.analysis.stats."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from loadgen.analysis import stats
from tests.analysis.synth import ar1


@pytest.mark.parametrize(
    "p, df, expected",
    [
        (0.95, 1, 6.313751514675),
        (0.95, 4, 2.131846786326),
        (0.975, 10, 2.228138851986),
        (0.95, 2.5, 2.558218614136),
        (0.995, 30, 2.749995653567),
        (0.05, 3, -2.353363434802),
        (0.9, 1e7, 1.281551565545),
    ],
)
def test_t_quantiles_match_tables(p, df, expected):
    assert stats.t_ppf(p, df) == pytest.approx(expected, rel=1e-7)


def test_t_cdf_inverts_t_ppf():
    for df in (0.7, 1.0, 3.3, 12.0, 200.0):
        for p in (0.51, 0.8, 0.95, 0.999):
            assert stats.t_cdf(stats.t_ppf(p, df), df) == pytest.approx(p, abs=1e-9)


def test_percentile_interpolates():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.percentile(xs, 0.0) == 1.0
    assert stats.percentile(xs, 1.0) == 5.0
    assert stats.percentile(xs, 0.5) == 3.0
    assert stats.percentile(xs, 0.125) == pytest.approx(1.5)


def test_isotonic_pools_violators_with_weights():
    assert stats.isotonic([1, 3, 2, 4], [1, 1, 1, 1]) == [1, 2.5, 2.5, 4]
    assert stats.isotonic([1, 3, 2, 4], [1, 3, 1, 1]) == [1, 2.75, 2.75, 4]
    assert stats.isotonic([3, 1, 2, 0], [1, 1, 1, 1], increasing=False) == [3, 1.5, 1.5, 0]


def test_monotone_zero():
    assert stats.monotone_zero([0, 1, 2], [-1, -0.5, 1]) == pytest.approx(4 / 3)
    assert stats.monotone_zero([0, 1], [1, -1], increasing=False) == pytest.approx(0.5)
    assert stats.monotone_zero([0, 1], [0.5, 1]) == 0  # clipped to the bracket
    assert stats.monotone_zero([0, 1], [-2, -1]) == 1


def test_circular_block_bootstrap_is_centred_and_has_the_block_variance():
    xs = [float(v) for v in (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)]
    for length in (1, 2, 3, 5):
        reps = stats.circular_block_bootstrap_means(xs, length, 20000, random.Random(length))
        assert statistics.fmean(reps) == pytest.approx(statistics.fmean(xs), abs=0.05)
    iid = stats.circular_block_bootstrap_means(xs, 1, 20000, random.Random(9))
    assert statistics.pvariance(iid) == pytest.approx(statistics.pvariance(xs) / len(xs), rel=0.05)


def test_pooled_autocorrelation_recovers_ar1():
    for phi in (0.0, 0.3, 0.6):
        est = [
            stats.pooled_autocorrelation([ar1(15, phi, random.Random(1000 * s + k)) for k in range(16)])
            for s in range(40)
        ]
        assert statistics.fmean(est) == pytest.approx(phi, abs=0.06)
    assert stats.pooled_autocorrelation([[1.0, 2.0, 3.0]]) == 0.0  # too short to tell


def test_block_length_and_variance_correction():
    assert stats.block_length(20, 0.0) == 1
    assert stats.block_length(5, 0.5) == 1
    assert 2 <= stats.block_length(20, 0.5) <= 20 // 3
    assert stats.variance_correction(10, 1, 0.0) == pytest.approx(10 / 9)
    # AR(1) with rho = 0.5: long-run factor 3, blocks of 1 see 1
    assert stats.ar1_variance_factor(0.5) == pytest.approx(3.0)
    assert stats.ar1_variance_factor(0.5, 1) == 1.0
    assert stats.variance_correction(20, 1, 0.5) > 3.0
    assert math.isfinite(stats.variance_correction(6, 2, 0.8))
