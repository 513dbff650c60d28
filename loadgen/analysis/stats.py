"""Small pure-Python statistics helpers used by :mod:`loadgen.analysis.crossover`.

Nothing here does I/O and nothing needs numpy: sample sizes are tiny (a stage
yields 3-30 windows), so plain Python is fast enough and keeps loadgen's
dependency list short.

Contents
--------
* :func:`pooled_autocorrelation`, :func:`block_length`,
  :func:`variance_correction` - how correlated consecutive windows are, how long
  the resampling blocks should be, and how much too narrow the bootstrap is;
* :func:`circular_block_bootstrap_means` - bootstrap replicates of a series' mean
  that keep neighbouring windows together;
* :func:`t_ppf`, :func:`z_ppf` - Student-t and normal quantiles;
* :func:`percentile` - linear-interpolation percentile of a list;
* :func:`isotonic` - weighted least-squares monotone fit (pool-adjacent-violators);
* :func:`monotone_zero` - where a monotone piecewise-linear curve crosses zero.
"""

from __future__ import annotations

import functools
import math
import random
from statistics import NormalDist
from typing import Sequence

__all__ = [
    "mean",
    "weighted_mean",
    "lag1_autocorrelation",
    "pooled_autocorrelation",
    "block_length",
    "ar1_variance_factor",
    "variance_correction",
    "circular_block_bootstrap_means",
    "t_ppf",
    "t_cdf",
    "z_ppf",
    "percentile",
    "isotonic",
    "monotone_zero",
]

_NORMAL = NormalDist()


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def weighted_mean(xs: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """The mean of ``xs``, or with ``weights`` their weighted mean (sum w x / sum w)."""
    if weights is None:
        return mean(xs)
    return math.fsum(w * x for w, x in zip(weights, xs)) / math.fsum(weights)


# --------------------------------------------------------------------------- blocks


def lag1_autocorrelation(xs: Sequence[float]) -> float:
    """The ordinary lag-1 sample autocorrelation (0 for fewer than 3 values or a flat series)."""
    n = len(xs)
    if n < 3:
        return 0.0
    m = mean(xs)
    dev = [x - m for x in xs]
    c0 = math.fsum(d * d for d in dev)
    if c0 <= 0.0:
        return 0.0
    c1 = math.fsum(dev[i] * dev[i + 1] for i in range(n - 1))
    return c1 / c0


def pooled_autocorrelation(series: Sequence[Sequence[float]]) -> float:
    """Lag-1 autocorrelation shared by several series, corrected for small-sample bias.

    Each series is centred on its own mean; lag-1 cross-products and squares are
    summed over all series, so many short series (the stages of a ladder) give
    one usable estimate where each alone would not.  Centring on a short
    series' mean biases the estimate down by about ``(1 + 3r)/n`` (Kendall), so
    ``r = (n r_hat + 1)/(n - 3)`` with ``n`` the mean series length.  The result
    is clipped to [0, 0.8]; with a mean length below 5 (usually repeated stages
    rather than time windows) it is 0.
    """
    num = den = 0.0
    total = count = 0
    for xs in series:
        n = len(xs)
        if n < 2:
            continue
        m = mean(xs)
        dev = [x - m for x in xs]
        den += math.fsum(d * d for d in dev)
        num += math.fsum(dev[i] * dev[i + 1] for i in range(n - 1))
        total += n
        count += 1
    if count == 0 or den <= 0.0:
        return 0.0
    n_bar = total / count
    if n_bar < 5:
        return 0.0
    r = (n_bar * (num / den) + 1.0) / (n_bar - 3.0)
    return min(max(r, 0.0), 0.8)


def block_length(n: int, rho: float) -> int:
    """Block length for a circular block bootstrap of the mean of ``n`` windows.

    The optimal block length of Hall, Horowitz & Jing (1995) for an AR(1) series
    with lag-1 autocorrelation ``rho``: ``(3n/2)^(1/3) * (2 rho/(1 - rho^2))^(2/3)``,
    rounded, capped at ``n // 3`` so every replicate is made of at least three
    blocks; no positive autocorrelation gives blocks of one (the ordinary bootstrap).
    """
    if n < 6 or rho <= 0.0:
        return 1
    length = (1.5 * n) ** (1.0 / 3.0) * (2.0 * rho / (1.0 - rho * rho)) ** (2.0 / 3.0)
    return max(1, min(int(round(length)), n // 3))


def ar1_variance_factor(rho: float, length: int | None = None) -> float:
    """How much autocorrelation multiplies the variance of a mean, for AR(1) ``rho``.

    Without ``length`` this is the long-run factor ``(1 + rho)/(1 - rho)``; with it,
    the part a block bootstrap with blocks of ``length`` sees,
    ``1 + 2 sum_{k<length} (1 - k/length) rho^k`` (Bartlett weights).
    """
    if length is None:
        return (1.0 + rho) / (1.0 - rho)
    return 1.0 + 2.0 * math.fsum((1.0 - k / length) * rho**k for k in range(1, length))


def variance_correction(n: int, length: int, rho: float) -> float:
    """Factor by which a circular-block-bootstrap variance of a mean is too small.

    Two reasons: blocks of ``length`` miss autocorrelation at lags beyond them
    (``F / F_length`` for AR(1)), and centring on the sample mean shrinks every
    autocovariance estimate by about ``Var(mean)``, which removes ``length * F / n``
    from the bootstrap's factor.  For independent values (``rho = 0``) this is the
    familiar ``n / (n - 1)``.  Bounded so a very short, very correlated series
    gets a wide but finite interval.
    """
    f = ar1_variance_factor(rho)
    f_l = ar1_variance_factor(rho, length)
    return f / max(f_l - length * f / n, 0.25 * f_l)


def circular_block_bootstrap_means(
    xs: Sequence[float], length: int, n_boot: int, rng: random.Random, weights: Sequence[float] | None = None
) -> list[float]:
    """``n_boot`` circular-block-bootstrap replicates of the mean of ``xs``.

    Each replicate glues together ``ceil(n / length)`` blocks of ``length``
    consecutive values, starting at uniformly drawn positions, the series being
    wrapped around its end (Politis & Romano 1992) so that every value is equally
    likely to be drawn; the last block is cut so each replicate has exactly
    ``n`` values.  Only block sums are needed, so the cost is one random draw per
    block.  With ``weights`` (one per value, > 0 in sum) each replicate is the
    weighted mean of the values it drew, sum w x / sum w over them: the ratio
    estimator of a per-request mean from per-window sums and counts.  The draws
    are the same as without weights, so paired series resampled with one seed
    still draw the same windows.
    """
    n = len(xs)
    if n == 0:
        raise ValueError("cannot bootstrap an empty series")
    length = max(1, min(int(length), n))
    full_blocks, rest = divmod(n, length)
    if rest == 0:
        full_blocks -= 1
        rest = length

    def sums(vs: Sequence[float]) -> tuple[list[float], list[float]]:
        ext = list(vs) + list(vs[: length - 1])
        return [math.fsum(ext[i : i + length]) for i in range(n)], [math.fsum(ext[i : i + rest]) for i in range(n)]

    # every replicate = `full_blocks` whole blocks + one block cut to `rest` values
    if weights is not None and len(weights) != n:
        raise ValueError(f"{len(weights)} weights for {n} values")
    whole_x, cut_x = sums(xs if weights is None else [w * x for w, x in zip(weights, xs)])
    whole_w, cut_w = sums(weights) if weights is not None else (None, None)
    # rng.choices over n items draws floor(random() * n): the same draws whatever the values
    last = rng.choices(range(n), k=n_boot)
    draws = rng.choices(range(n), k=n_boot * full_blocks) if full_blocks else []
    out = []
    for b in range(n_boot):
        picked = draws[b * full_blocks : (b + 1) * full_blocks]
        num = math.fsum(whole_x[i] for i in picked) + cut_x[last[b]]
        # unweighted, every replicate holds exactly n values
        den = n if whole_w is None else math.fsum(whole_w[i] for i in picked) + cut_w[last[b]]
        out.append(num / den if den > 0 else math.nan)
    return out


# --------------------------------------------------------------------------- quantiles


def z_ppf(p: float) -> float:
    """Standard normal quantile."""
    return _NORMAL.inv_cdf(p)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student-t distribution function."""
    if df > 1e6:
        return _NORMAL.cdf(t)
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def _t_pdf(t: float, df: float) -> float:
    log_c = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Student-t quantile for any real ``df > 0`` (normal quantile when df is huge)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if df <= 0:
        raise ValueError("df must be positive")
    if df > 1e6:
        return z_ppf(p)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    # bracket [lo, hi], then safeguarded Newton from the normal quantile
    lo, hi = 0.0, max(2.0 * z_ppf(p), 1.0)
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    x = min(max(z_ppf(p), lo), hi)
    for _ in range(100):
        f = t_cdf(x, df) - p
        if f < 0.0:
            lo = x
        else:
            hi = x
        step = f / max(_t_pdf(x, df), 1e-300)
        nx = x - step
        if not lo < nx < hi:
            nx = 0.5 * (lo + hi)
        if abs(nx - x) <= 1e-12 * max(1.0, abs(x)):
            return nx
        x = nx
    return x


def percentile(xs: Sequence[float], q: float, presorted: bool = False) -> float:
    """The ``q`` quantile (0..1) of ``xs`` by linear interpolation between order statistics."""
    s = xs if presorted else sorted(xs)
    if not s:
        raise ValueError("percentile of an empty list")
    pos = q * (len(s) - 1)
    i = int(math.floor(pos))
    if i >= len(s) - 1:
        return s[-1]
    frac = pos - i
    return s[i] + frac * (s[i + 1] - s[i])


# --------------------------------------------------------------------------- monotone fits


def isotonic(y: Sequence[float], w: Sequence[float], increasing: bool = True) -> list[float]:
    """Weighted least-squares fit of ``y`` by a monotone sequence (pool adjacent violators)."""
    sign = 1.0 if increasing else -1.0
    blocks: list[list[float]] = []  # [value, weight, count]
    for yi, wi in zip(y, w):
        blocks.append([sign * yi, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, c2 = blocks.pop()
            v1, w1, c1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    out: list[float] = []
    for v, _, c in blocks:
        out.extend([sign * v] * int(c))
    return out


def monotone_zero(xs: Sequence[float], f: Sequence[float], increasing: bool = True) -> float:
    """Where the piecewise-linear curve through ``(xs, f)`` first reaches zero.

    ``f`` is assumed monotone in the stated direction; if it never changes sign
    the nearest end of ``xs`` is returned (the zero is clipped to the bracket).
    """
    g = list(f) if increasing else [-v for v in f]
    if g[0] >= 0.0:
        return xs[0]
    for i in range(len(g) - 1):
        if g[i + 1] >= 0.0:
            t = -g[i] / (g[i + 1] - g[i])
            return xs[i] + t * (xs[i + 1] - xs[i])
    return xs[-1]
