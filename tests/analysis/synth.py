"""Synthetic stage data from known curves, for testing loadgen.analysis.crossover.

Pure Python (no numpy).  Curves are monotone cubic (PCHIP, Fritsch-Carlson)
interpolations on log concurrency through a table, so between table points they
are smooth rather than the piecewise-linear shape the estimator assumes; window
noise is multiplicative AR(1), i.e. autocorrelated like consecutive time windows.
"""

from __future__ import annotations

import bisect
import math
import random
from typing import Callable, Sequence

from loadgen.analysis.crossover import StageSamples

LADDER = [1, 2, 5, 10, 30, 70, 100, 250]

# The measured table from issue 6 (output tok/s): C -> (spec, baseline)
TABLE = {
    1: (86.8, 92.7),
    2: (145.5, 157.7),
    5: (279.0, 290.8),
    10: (428.0, 453.2),
    30: (759.3, 689.4),
    70: (768.6, 752.8),
    100: (775.0, 773.1),
    250: (754.4, 718.1),
}


def pchip(xs: Sequence[float], ys: Sequence[float]) -> Callable[[float], float]:
    """Monotone piecewise-cubic Hermite interpolant through (xs, ys); flat beyond the ends."""
    n = len(xs)
    h = [xs[i + 1] - xs[i] for i in range(n - 1)]
    d = [(ys[i + 1] - ys[i]) / h[i] for i in range(n - 1)]
    m = [0.0] * n
    for i in range(1, n - 1):
        if d[i - 1] * d[i] > 0:
            w1, w2 = 2 * h[i] + h[i - 1], h[i] + 2 * h[i - 1]
            m[i] = (w1 + w2) / (w1 / d[i - 1] + w2 / d[i])
    m[0], m[-1] = d[0], d[-1]
    if n > 2:
        for end, k0, k1 in ((0, 0, 1), (n - 1, n - 2, n - 3)):
            hh0, hh1 = h[min(k0, n - 2)], h[min(k1, n - 2)]
            dd0, dd1 = d[min(k0, n - 2)], d[min(k1, n - 2)]
            v = ((2 * hh0 + hh1) * dd0 - hh0 * dd1) / (hh0 + hh1)
            if v * dd0 <= 0:
                v = 0.0
            elif dd0 * dd1 <= 0 and abs(v) > abs(3 * dd0):
                v = 3 * dd0
            m[end] = v

    def f(x: float) -> float:
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        i = min(bisect.bisect_right(xs, x) - 1, n - 2)
        t = (x - xs[i]) / h[i]
        t2, t3 = t * t, t * t * t
        return (
            (2 * t3 - 3 * t2 + 1) * ys[i]
            + (t3 - 2 * t2 + t) * h[i] * m[i]
            + (-2 * t3 + 3 * t2) * ys[i + 1]
            + (t3 - t2) * h[i] * m[i + 1]
        )

    return f


def log_curve(table: dict[int, float]) -> Callable[[float], float]:
    """Curve C -> value, PCHIP on ln C through ``table``."""
    cs = sorted(table)
    g = pchip([math.log(c) for c in cs], [table[c] for c in cs])
    return lambda c: g(math.log(c))


def table_curves() -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(baseline, spec) throughput curves shaped like the measured table."""
    return log_curve({c: b for c, (s, b) in TABLE.items()}), log_curve({c: s for c, (s, b) in TABLE.items()})


def true_crossovers(base: Callable[[float], float], spec: Callable[[float], float], lo: float, hi: float) -> list[float]:
    """Zeros of spec - base on [lo, hi], found on a fine log grid then bisected."""
    g = lambda c: spec(c) - base(c)  # noqa: E731
    grid = [lo * (hi / lo) ** (i / 4000) for i in range(4001)]
    out = []
    for a, b in zip(grid, grid[1:]):
        if (g(a) < 0.0 and g(b) > 0.0) or (g(a) > 0.0 and g(b) < 0.0):
            for _ in range(80):
                m = math.sqrt(a * b)
                if (g(a) < 0) == (g(m) < 0):
                    a = m
                else:
                    b = m
            out.append(math.sqrt(a * b))
    return out


def ar1(n: int, phi: float, rng: random.Random) -> list[float]:
    """Stationary AR(1) series with unit marginal variance."""
    e = rng.gauss(0.0, 1.0)
    out = [e]
    s = math.sqrt(1.0 - phi * phi)
    for _ in range(n - 1):
        e = phi * e + s * rng.gauss(0.0, 1.0)
        out.append(e)
    return out


def windows(mean: float, cv: float, n: int, phi: float, rng: random.Random) -> list[float]:
    """``n`` window values around ``mean`` with coefficient of variation ``cv`` and lag-1 correlation ``phi``."""
    return [max(0.0, mean * (1.0 + cv * e)) for e in ar1(n, phi, rng)]


def stages(
    curve: Callable[[float], float],
    concurrencies: Sequence[int],
    rng: random.Random,
    *,
    n: int | Callable[[int], int] = 15,
    cv: float | Callable[[int], float] = 0.03,
    phi: float = 0.3,
    higher_is_better: bool = True,
) -> list[StageSamples]:
    out = []
    for c in concurrencies:
        nn = n(c) if callable(n) else n
        cc = cv(c) if callable(cv) else cv
        out.append(StageSamples(c, windows(curve(c), cc, nn, phi, rng), higher_is_better))
    return out


def relative_pair(
    base_table: dict[int, float], delta_table: dict[int, float]
) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(baseline, spec) where spec = baseline * (1 + delta), both PCHIP on ln C."""
    base = log_curve(base_table)
    delta = log_curve(delta_table)
    return base, (lambda c: base(c) * (1.0 + delta(c)))


BASE_TABLE = {c: b for c, (s, b) in TABLE.items()}

# speculation wins at low and high concurrency and loses in between
TWO_CROSSOVERS = relative_pair(
    BASE_TABLE, {1: 0.08, 2: 0.07, 5: 0.04, 10: -0.04, 30: -0.08, 70: -0.05, 100: 0.03, 250: 0.08}
)
# speculation wins everywhere, by less and less
SPEC_ALWAYS = relative_pair(BASE_TABLE, {1: 0.12, 2: 0.11, 5: 0.09, 10: 0.07, 30: 0.05, 70: 0.04, 100: 0.035, 250: 0.03})
# speculation loses everywhere
BASE_ALWAYS = relative_pair(BASE_TABLE, {1: -0.03, 2: -0.04, 5: -0.05, 10: -0.06, 30: -0.07, 70: -0.08, 100: -0.08, 250: -0.1})
# TTFT-like (lower is better): speculation cuts it at low load and adds to it under heavy load
TTFT_BASE = {1: 40.0, 2: 42.0, 5: 48.0, 10: 60.0, 30: 110.0, 70: 240.0, 100: 350.0, 250: 900.0}
TTFT_PAIR = relative_pair(TTFT_BASE, {1: -0.10, 2: -0.09, 5: -0.07, 10: -0.04, 30: 0.03, 70: 0.08, 100: 0.10, 250: 0.12})


def run_ladder(
    base: Callable[[float], float],
    spec: Callable[[float], float],
    seed: int,
    *,
    n: int = 20,
    phi: float = 0.3,
    cv_range: tuple[float, float] = (0.02, 0.05),
    refine: bool = True,
    budget: int = 6,
    n_boot: int = 1000,
    higher_is_better: bool = True,
    ladder: Sequence[int] = LADDER,
    family_wise: bool = True,
):
    """Measure the ladder on synthetic curves, then refine while refine_plan asks for stages.

    Each concurrency gets its own window noise level, drawn once from ``cv_range``
    and shared by both targets.
    """
    from loadgen.analysis.crossover import analyze, refine_plan

    rng = random.Random(seed)
    cvs: dict[int, float] = {}

    def cv(c: int) -> float:
        if c not in cvs:
            cvs[c] = rng.uniform(*cv_range)
        return cvs[c]

    def measure(cs: Sequence[int]) -> tuple[list[StageSamples], list[StageSamples]]:
        kw = dict(n=n, cv=cv, phi=phi, higher_is_better=higher_is_better)
        return stages(base, cs, rng, **kw), stages(spec, cs, rng, **kw)

    bs, ss = measure(ladder)

    def run():
        return analyze(
            "metric", bs, ss, seed=seed, n_boot=n_boot, ladder=ladder, family_wise=family_wise
        )

    analysis = run()
    while refine and budget > 0:
        plan = refine_plan(analysis, budget_stages=budget)
        if not plan:
            break
        budget -= len(plan)
        more_b, more_s = measure(plan)
        bs += more_b
        ss += more_s
        analysis = run()
    return analysis
