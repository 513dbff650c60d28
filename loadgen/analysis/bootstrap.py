"""The bootstrap of one comparison: from its inputs to its replicates, intervals and p-value.

In: a ``StageComparison``'s ``Bootstrap`` inputs (both targets' per-window samples, seed,
n_boot) and its pooled ``rho``. Out: ``Boot``, the replicates of log(mean_spec / mean_baseline)
and what is read off them. The same inputs always give the same replicates: the random
numbers come from seed strings of (seed, C, target), so a comparison reloaded from
crossover.json regenerates those of the live one; ``boot_of`` caches them (refinement
re-judges the same stages many times). How and why: loadgen.analysis.crossover §2.
"""

from __future__ import annotations

import functools
import math
import random

from loadgen.analysis import stats
from loadgen.analysis.results import DEFAULT_N_BOOT, StageComparison


def _expm1(x: float) -> float:
    """exp(x) - 1, saturating instead of overflowing for absurd widths."""
    return math.expm1(min(x, 700.0))


class Boot:
    """Bootstrap state of one comparison, derived from its ``Bootstrap`` inputs (never serialized).

    ``log_ratio`` is log(mean_spec / mean_baseline); ``dev`` holds the bootstrap
    replicates of it minus ``log_ratio``, already corrected for the bootstrap's
    small-sample variance deflation; ``df`` the Welch-Satterthwaite degrees of
    freedom used to stretch them to a Student-t width.
    """

    __slots__ = ("log_ratio", "dev", "sorted_dev", "df", "var")

    def __init__(self, log_ratio: float, dev: list[float], df: float):
        self.log_ratio = log_ratio
        self.dev = dev
        self.sorted_dev = sorted(dev)
        self.df = df
        m = stats.mean(dev)
        self.var = math.fsum((d - m) ** 2 for d in dev) / max(1, len(dev) - 1)

    def stretch(self, level: float) -> float:
        q = 0.5 + level / 2.0
        return stats.t_ppf(q, self.df) / stats.z_ppf(q)

    def interval(self, level: float) -> tuple[float, float]:
        """Interval for delta at ``level`` (on the delta scale)."""
        k = self.stretch(level)
        a = (1.0 - level) / 2.0
        lo = self.log_ratio + k * stats.percentile(self.sorted_dev, a, presorted=True)
        hi = self.log_ratio + k * stats.percentile(self.sorted_dev, 1.0 - a, presorted=True)
        return _expm1(lo), _expm1(hi)

    def p_value(self) -> float:
        """Two-sided p-value for "no difference": one minus the highest level whose interval excludes 0."""
        r = self.log_ratio
        if r == 0.0:
            return 1.0

        def excludes(q: float) -> bool:
            # interval at level 2q - 1 excludes 0  <=>  stretch(q) * |tail quantile| < |r|
            # <=>  t_df(q) < z(q) |r| / |tail|  <=>  q < T_df(z(q) |r| / |tail|)
            tail = stats.percentile(self.sorted_dev, 1.0 - q if r > 0 else q, presorted=True)
            if (tail >= 0.0) if r > 0 else (tail <= 0.0):
                return True
            return q < stats.t_cdf(stats.z_ppf(q) * abs(r) / abs(tail), self.df)

        lo, hi = 0.5, 1.0 - 1e-12
        if not excludes(0.5 + 1e-9):
            return 1.0
        if excludes(hi):
            return 2e-12
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            if excludes(mid):
                lo = mid
            else:
                hi = mid
        return 2.0 * (1.0 - lo)

    def replicates(self, level: float) -> list[float]:
        """Bootstrap replicates of delta, stretched for ``level``."""
        k = self.stretch(level)
        return [_expm1(self.log_ratio + k * d) for d in self.dev]


@functools.lru_cache(maxsize=512)
def _bootstrap_means(xs: tuple[float, ...], length: int, n_boot: int, seed: str,
                     weights: tuple[float, ...] | None = None) -> tuple[float, ...]:
    """Bootstrap means, cached: refinement re-analyses the same stages many times."""
    return tuple(stats.circular_block_bootstrap_means(xs, length, n_boot, random.Random(seed), weights))


# 256: a run's comparisons (7 metrics x 8 stages x 3 workloads = 168), which judging reads several times each;
# a Boot holds 2 x n_boot floats, so the cache stays under ~25 MB.
@functools.lru_cache(maxsize=256)
def bootstrap(concurrency: int, rho: float, xb: tuple[float, ...], xs: tuple[float, ...], seed: int,
              n_boot: int, paired: bool = False, wb: tuple[float, ...] | None = None,
              ws: tuple[float, ...] | None = None) -> tuple[Boot, int, int]:
    """(the Boot, baseline block length, spec block length) of one comparison.

    ``xb``/``xs``: checked samples, both at least 2 with positive means; ``rho``: already clamped.
    ``paired``: equal-length series aligned window by window, resampled at the same blocks (one seed
    string for both), so what moves both alike (an open loop's shared schedule: at 15 req/s its
    bursts moved both targets' per-window decode rate between 86 and 211 tok/s) cancels in the ratio.
    ``wb``/``ws``: per-window weights, each side's mean then weighted (StageSamples.weights).
    """
    per_target = []
    if paired and len(xb) != len(xs):
        raise ValueError(f"C={concurrency}: paired series differ in length ({len(xb)}, {len(xs)})")
    for who, xx, ww in (("baseline", xb, wb), ("spec", xs, ws)):
        n = len(xx)
        m = stats.weighted_mean(xx, ww)
        length = stats.block_length(n, rho)
        # The seed strings keep the module's old name (loadgen.crossover): a seed change would move every interval.
        name = f"loadgen.crossover:{seed}:{concurrency}:{'paired' if paired else who}"
        reps = _bootstrap_means(xx, length, n_boot, name, ww)
        floor = m * 1e-9
        log_m = math.log(m)
        inflate = math.sqrt(stats.variance_correction(n, length, rho))
        dev = [inflate * (math.log(max(r, floor)) - log_m) for r in reps]
        var = math.fsum(d * d for d in dev) / n_boot
        dof = max(1.0, n / max(stats.ar1_variance_factor(rho), length) - 1.0)
        per_target.append((length, dev, var, dof))

    (lb, db, vb, dfb), (ls, ds, vs, dfs) = per_target
    if vb + vs > 0.0:
        df = (vb + vs) ** 2 / (vb * vb / dfb + vs * vs / dfs)
    else:
        df = 1e9
    return Boot(math.log(stats.weighted_mean(xs, ws) / stats.weighted_mean(xb, wb)), [s - b for s, b in zip(ds, db)],
                df), lb, ls


@functools.lru_cache(maxsize=512)
def _refit(concurrency: int, delta: float, ci_low: float, ci_high: float, df: float | None, confidence: float,
           n_boot: int) -> Boot:
    """Normal replicates with the recorded width (log scale), for a comparison from a file without its inputs."""
    df = df if df is not None else 1e9
    q = 0.5 + confidence / 2.0
    half = (math.log1p(ci_high) - math.log1p(ci_low)) / 2.0
    sd = half / stats.t_ppf(q, df) if half > 0 else 0.0
    rng = random.Random(f"loadgen.crossover:refit:{concurrency}")
    return Boot(math.log1p(delta), [rng.gauss(0.0, sd) for _ in range(n_boot)], df)


def boot_of(c: StageComparison, n_boot: int = DEFAULT_N_BOOT) -> Boot | None:
    """The comparison's bootstrap: regenerated from its inputs; None when it has no interval.

    A comparison from a crossover.json written before the inputs were kept gets normal
    replicates with its recorded interval's width instead, so crossovers can still be located.
    """
    if c.delta is None or c.ci_low is None or c.ci_high is None:
        return None
    b = c.bootstrap
    if b is not None:
        return bootstrap(c.concurrency, c.rho, *b.key())[0]
    if c.delta <= -1.0:
        return None
    return _refit(c.concurrency, c.delta, c.ci_low, c.ci_high, c.df, c.confidence, n_boot)
