"""Where does speculative decoding stop (or start) paying off?  The statistics.

This module is pure: it takes per-window measurements of one metric for the
two targets ("baseline" and "spec") at each concurrency C of the ladder and
says, with stated confidence, where speculation is better, worse or tied and
where the better target changes (a *crossover*).  It does no I/O.

Reading guide (plain words)
===========================

1. What is compared at one concurrency
--------------------------------------
A stage's steady window is cut into equal time windows (say 2 s) and the
metric is measured in each, e.g. output tok/s.  For each target we take the
**mean** over the windows; for equal windows the mean of per-window rates is
the total tokens over the total time, the figure people mean by "throughput".
(Medians of 3-20 values are coarse and bootstrap badly, so we don't use them.)
The difference is relative::

    delta = (mean_spec - mean_baseline) / mean_baseline

so +0.10 means speculation is 10 % higher.  For a metric where lower is
better (TTFT, ITL) a negative delta is good for speculation.

2. How sure are we about delta?  (the interval)
-----------------------------------------------
Consecutive windows are not independent: a window with a lucky batch is
followed by a similar one.  Treating them as independent would make the
interval too narrow.  So:

* We estimate how strongly neighbouring windows are correlated (the lag-1
  autocorrelation), pooled over every stage and both targets of the metric:
  one stage's ten windows cannot tell, but a ladder's couple of hundred can.
  Short series underestimate it by about (1 + 3r)/n, which we add back.
* We resample each target's windows with a **circular block bootstrap**: glue
  together randomly chosen runs of consecutive windows (block length from the
  Hall-Horowitz-Jing rule for the estimated correlation, at most n/3) into a
  new series of the same length and take its mean; 2000 times.  The two
  targets ran separately, so they are resampled independently.  Random
  numbers come from fixed seeds derived from (seed, C, target): the same input
  always gives the same answer.
* A bootstrap from a handful of windows is too narrow, for three known
  reasons, and we correct each: the spread of a resampled mean is short by the
  familiar factor (n-1)/n (more with blocks); short blocks miss correlation
  between windows further apart (we add it back assuming the correlation decays
  geometrically, AR(1)); and with few windows the spread itself is uncertain, so
  the interval is stretched from normal to Student-t width, with degrees of
  freedom from the effective number of independent windows (Welch-Satterthwaite
  across the two targets).
* The interval is read off the resampled log(mean_spec / mean_baseline) at the
  5th and 95th percentiles (for 90 %) and turned back into delta.

Measured on synthetic stages (tests/crossover prints the figures): nominal
90 % intervals cover the true delta in 91-95 % of stages, for independent
windows, for lag-1 correlation 0.3 and 0.5, for 4 to 20 windows a stage and
for unequal counts between the targets.

3. The verdict at one stage
---------------------------
"tie" when the interval contains 0, or when |delta| is below a practical
margin (default 1 %: a smaller difference is not worth a configuration
change even when it is real); otherwise "spec" or "baseline", whichever is
better for this metric.

A tie only says the two were not told apart.  It is a *measured* tie
("no difference beyond ±5 %") when the whole interval lies inside
±``tie_margin`` (default 5 %); otherwise the stage is **inconclusive**
(``StageComparison.wide``): on the issue's GPU run a "tie" at C=16 had the
interval [-43.9, +102.7] %, which rules out nothing.  5 %: repeated runs of
one server drifted by ±10 % (§Limits), so a single run's tie is not worth
claiming tighter, and a possible loss wider than that matters to the
decision.  :func:`recommendation` says how much more data an inconclusive
stage needs: the interval's half-width falls as 1/sqrt(windows), so
narrowing it to ±tie_margin takes about (half-width / tie_margin)² times the
windows (on the log scale; tests/crossover/test_verdicts.py checks it).  A
narrower interval is necessary, not sufficient, for a tie: if the difference
is real it then shows up as a winner instead, which settles it as well.

4. Many stages at once, and crossovers
--------------------------------------
A 90 % interval is wrong one time in ten.  Over an 8-stage ladder of pure
noise, stage-by-stage verdicts show speculation "winning" somewhere and
"losing" somewhere else - a false crossover - in about 9 % of ladders
(measured).  A crossover is a claim about the whole ladder, so it is judged on
**simultaneous** intervals: each of the k ladder stages at level
0.90^(1/k) (98.7 % for k = 8; the Sidak correction), so that all k hold
together with 90 % probability.  A false crossover needs at least one wrong
verdict, so it happens in at most 10 % of ladders, in practice far fewer (0 of
200 pure-noise ladders).  ``StageComparison.family_verdict`` is the verdict at
that level and the regions in :class:`MetricAnalysis` use it; a change of
winner that only the per-stage verdicts show is listed in ``candidates``,
not ``crossovers``.

A crossover is declared between two consecutive significant ladder stages
with opposite verdicts.  Tied stages between them are allowed (the crossover
lies somewhere across the tie); all stages from one bracket to the other form
its *span*.

* **Estimate.**  Across the span, delta should move from one sign to the
  other; we fit the closest monotone sequence to the measured deltas (weighted
  isotonic regression, so a noisy tie cannot make it zig-zag) and find where
  the line joining them on log C reaches zero.  With only the two brackets
  this is plain linear interpolation of delta on log C.
* **Interval.**  Every concurrency in the span where the difference,
  interpolated on log C between neighbouring stages, is not distinguishable
  from zero at the simultaneous level: for each candidate C, the matching
  bootstrap replicates of the two neighbouring stages are interpolated, and C
  is in the interval unless zero falls in a tail of that distribution.  (This
  is Fieller's idea: it widens by itself when the slope is uncertain, where
  percentiles of a bootstrapped zero would not.)  It is then cut at the last
  stage where one target is significantly better and the first where the
  other is, since the zero cannot lie beyond them if delta is monotone; in
  particular it never leaves the bracket.  The interval is at the
  simultaneous level, so read "90 %" as "at least 90 %": in the tests it
  covers the true crossover in 98-100 % of ladders.
* **Direction.**  "spec_to_baseline" when speculation wins below and loses
  above, else "baseline_to_spec".

Interpolation is the weak point: delta is not a straight line in log C, and
with stages a factor 3 apart the interpolated zero can be off by 10 % or more
(the issue's table: 14.8 interpolated between C=10 and 30, against 13.4 where
smooth curves through the same points cross), while the interval only
accounts for noise; on the coarse ladder it still covered the true crossover
in 56 of 60 synthetic ladders, but the estimate was within 15 % in only 48.
:func:`refine_plan` fixes this by proposing a stage in the middle (on log C)
of the gap between measured stages that holds most of the interval, until
both the interval and the gaps it overlaps are narrower than a ratio
(default 1.3) or a budget is spent; with about 5 extra stages the estimate
was within 15 % in 60 of 60.  Stages added this way help to place the crossovers they lie in but
never declare one (pass the planned ``ladder`` to :func:`analyze`), so
refining cannot create a crossover nor dilute the simultaneous level.

5. Limits
---------
* The interval covers window-to-window noise within a run, not drift between
  runs done at different times (the issue's five single-stream runs of one
  server ranged 88.6-107.7 tok/s).  To include that, repeat stages and pass
  one value per repetition as the samples, or alternate the targets.
* With fewer than about 5 windows per stage the correlation cannot be
  estimated and is taken as 0 (right for repetitions, optimistic for windows).
* Power: with the issue's table, 2-5 % window noise and lag-1 correlation
  0.3, the crossover was confirmed in 60/60 ladders with 20 windows a stage,
  53/60 with 15 and 34/60 with 10; with correlation 0.5 and 20 windows, 50/60.
  Most misses still show up as candidates: measure longer steady windows
  when that happens.
"""

from __future__ import annotations

import bisect
import functools
import math
import random
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Sequence

from . import stats

__all__ = [
    "StageSamples",
    "StageComparison",
    "Crossover",
    "Region",
    "MetricAnalysis",
    "compare_stage",
    "find_crossovers",
    "analyze",
    "refine_plan",
    "recommendation",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_MARGIN",
    "DEFAULT_TIE_MARGIN",
    "DEFAULT_N_BOOT",
    "Scope",
    "Verdict",
    "verdict",
    "more_data_factor",
]

DEFAULT_CONFIDENCE = 0.90
DEFAULT_MARGIN = 0.01
# A tie is called only when the interval lies inside ±5 % (module doc §3); wider, it is inconclusive.
DEFAULT_TIE_MARGIN = 0.05
DEFAULT_N_BOOT = 2000

SPEC = "spec"
BASELINE = "baseline"
TIE = "tie"
INCONCLUSIVE = "inconclusive"
NOT_COMPARED = "not compared"
SPEC_TO_BASELINE = "spec_to_baseline"
BASELINE_TO_SPEC = "baseline_to_spec"


# --------------------------------------------------------------------------- data


@dataclass
class StageSamples:
    """One metric of one target at one concurrency.

    ``samples`` are the metric over consecutive equal time windows of the
    stage's steady window (in time order), or one value per repetition of the
    stage.  All values must be >= 0 and finite.
    """

    concurrency: int
    samples: list[float]
    higher_is_better: bool


@dataclass
class StageComparison:
    """Speculation against the baseline at one concurrency.

    ``delta`` is ``(mean_spec - mean_baseline) / mean_baseline``; ``ci_low`` and
    ``ci_high`` bound it at ``confidence``.  ``verdict`` says who is better at
    this stage alone ("spec", "baseline") or "tie"; ``family_verdict`` (set by
    :func:`analyze`) is the same judged with the whole ladder's simultaneous
    intervals.  ``rho`` is the window autocorrelation used, ``block_*`` the
    bootstrap block lengths, ``df`` the degrees of freedom of the t stretch,
    ``p_value`` the two-sided p-value for "no difference".  ``delta``,
    ``ci_*``, ``df`` and ``p_value`` are ``None`` when the stage could not be
    compared (``note`` says why); such a stage is a tie.  ``wide`` is True
    when the interval reaches beyond ±``tie_margin`` (or there is none): a tie
    there is inconclusive, not a measured "no difference" (module doc §3).
    """

    concurrency: int
    higher_is_better: bool
    n_baseline: int
    n_spec: int
    mean_baseline: float
    mean_spec: float
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    margin: float
    verdict: str
    block_baseline: int = 1
    block_spec: int = 1
    df: float | None = None
    rho: float = 0.0
    p_value: float | None = None
    family_verdict: str | None = None
    note: str = ""
    tie_margin: float = DEFAULT_TIE_MARGIN
    wide: bool = False


@dataclass
class Crossover:
    """A concurrency at which the better target changes.

    ``low_c``/``high_c`` are the ladder stages with opposite, significant
    verdicts that bracket it; ``span`` lists every measured stage from one to
    the other (tied stages and refinement stages included).  ``estimate`` is
    where the fitted difference crosses zero and ``ci_low``..``ci_high`` its
    interval, at ``confidence`` for the whole ladder (each stage judged at
    ``stage_level``, see the module doc).  ``confirmed`` is False for a
    change of winner that only stage-by-stage verdicts show (the
    ``candidates`` of :class:`MetricAnalysis`).  ``local_low_c`` and
    ``local_high_c`` are the measured stages immediately around the
    estimate: between them its position rests on interpolation.
    """

    low_c: int
    high_c: int
    estimate: float
    ci_low: float
    ci_high: float
    direction: str
    confidence: float
    stage_level: float
    confirmed: bool = True
    span: list[int] = field(default_factory=list)
    local_low_c: int = 0
    local_high_c: int = 0


@dataclass
class Region:
    """Consecutive measured stages with the same verdict."""

    verdict: str
    low_c: int
    high_c: int
    concurrencies: list[int]


@dataclass
class MetricAnalysis:
    """Everything :func:`analyze` found for one metric.

    ``regions`` group consecutive stages by verdict (the simultaneous
    ``family_verdict`` when ``family_wise``); ``crossovers`` are confirmed,
    ``candidates`` are changes of winner seen only stage by stage.  ``rho``
    is the window autocorrelation pooled over all stages, ``ladder`` the
    stages allowed to declare crossovers, ``unpaired`` concurrencies that
    only one target ran (not compared).
    """

    metric: str
    higher_is_better: bool
    confidence: float
    margin: float
    family_wise: bool
    comparisons: list[StageComparison]
    regions: list[Region]
    crossovers: list[Crossover]
    candidates: list[Crossover] = field(default_factory=list)
    rho: float = 0.0
    ladder: list[int] = field(default_factory=list)
    unpaired: list[int] = field(default_factory=list)
    tie_margin: float = DEFAULT_TIE_MARGIN


# --------------------------------------------------------------------------- bootstrap state


def _expm1(x: float) -> float:
    """exp(x) - 1, saturating instead of overflowing for absurd widths."""
    return math.expm1(min(x, 700.0))


class _Boot:
    """Bootstrap state of one comparison (kept off the dataclass fields, so not serialized).

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


def _boot_of(c: StageComparison, n_boot: int = DEFAULT_N_BOOT) -> _Boot | None:
    b = getattr(c, "_boot", None)
    if b is not None:
        return b
    if c.delta is None or c.ci_low is None or c.ci_high is None or c.delta <= -1.0:
        return None
    # A comparison rebuilt from JSON: fall back to normal replicates with the
    # recorded width (log scale), so crossovers can still be located.
    df = c.df if c.df is not None else 1e9
    q = 0.5 + c.confidence / 2.0
    half = (math.log1p(c.ci_high) - math.log1p(c.ci_low)) / 2.0
    sd = half / stats.t_ppf(q, df) if half > 0 else 0.0
    # The seed strings keep the module's old name (loadgen.crossover): a seed change would move every interval.
    rng = random.Random(f"loadgen.crossover:refit:{c.concurrency}")
    b = _Boot(math.log1p(c.delta), [rng.gauss(0.0, sd) for _ in range(n_boot)], df)
    object.__setattr__(c, "_boot", b)
    return b


@functools.lru_cache(maxsize=512)
def _bootstrap_means(xs: tuple[float, ...], length: int, n_boot: int, seed: str) -> tuple[float, ...]:
    """Bootstrap means, cached: refinement re-analyses the same stages many times."""
    return tuple(stats.circular_block_bootstrap_means(xs, length, n_boot, random.Random(seed)))


def _verdict(delta: float, lo: float, hi: float, margin: float, higher_is_better: bool) -> str:
    if lo <= 0.0 <= hi or abs(delta) < margin:
        return TIE
    return SPEC if (delta > 0.0) == higher_is_better else BASELINE


def _wide(lo: float | None, hi: float | None, tie_margin: float) -> bool:
    """True when the interval cannot rule out a difference beyond ±tie_margin (no interval: True)."""
    return lo is None or hi is None or lo < -tie_margin or hi > tie_margin


def _check_samples(s: StageSamples, who: str) -> list[float]:
    xs = [float(x) for x in s.samples]
    for x in xs:
        if not math.isfinite(x) or x < 0.0:
            raise ValueError(f"{who} stage C={s.concurrency}: sample {x!r} is not a finite value >= 0")
    return xs


# --------------------------------------------------------------------------- one stage


def compare_stage(
    base: StageSamples,
    spec: StageSamples,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    margin: float = DEFAULT_MARGIN,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    rho: float | None = None,
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> StageComparison:
    """Compare one metric of the two targets at one concurrency (see the module doc).

    ``rho`` is the lag-1 autocorrelation of consecutive windows; by default it is
    estimated from these two series (:func:`analyze` pools every stage instead).
    """
    if base.concurrency != spec.concurrency:
        raise ValueError(f"concurrency mismatch: baseline C={base.concurrency}, spec C={spec.concurrency}")
    if base.higher_is_better != spec.higher_is_better:
        raise ValueError(f"C={base.concurrency}: targets disagree on higher_is_better")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    c = base.concurrency
    hib = base.higher_is_better
    xb = _check_samples(base, "baseline")
    xs = _check_samples(spec, "spec")
    mb = stats.mean(xb) if xb else 0.0
    ms = stats.mean(xs) if xs else 0.0

    def unusable(note: str, delta: float | None = None) -> StageComparison:
        return StageComparison(c, hib, len(xb), len(xs), mb, ms, delta, None, None, confidence, margin, TIE, note=note,
                               tie_margin=tie_margin, wide=True)

    if len(xb) < 2 or len(xs) < 2:
        return unusable(
            f"too few samples to compare (baseline {len(xb)}, spec {len(xs)}; need 2 each)",
            (ms - mb) / mb if xb and xs and mb > 0 else None,
        )
    if mb <= 0.0 or ms <= 0.0:
        return unusable("a mean is zero, the relative difference is undefined")

    if rho is None:
        rho = stats.pooled_autocorrelation([xb, xs])
    rho = min(max(float(rho), 0.0), 0.8)
    per_target = []
    for who, xx, m in (("baseline", xb, mb), ("spec", xs, ms)):
        n = len(xx)
        length = stats.block_length(n, rho)
        reps = _bootstrap_means(tuple(xx), length, n_boot, f"loadgen.crossover:{seed}:{c}:{who}")
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
    boot = _Boot(math.log(ms / mb), [s - b for s, b in zip(ds, db)], df)
    delta = ms / mb - 1.0
    lo, hi = boot.interval(confidence)
    out = StageComparison(
        concurrency=c,
        higher_is_better=hib,
        n_baseline=len(xb),
        n_spec=len(xs),
        mean_baseline=mb,
        mean_spec=ms,
        delta=delta,
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        margin=margin,
        verdict=_verdict(delta, lo, hi, margin, hib),
        block_baseline=lb,
        block_spec=ls,
        df=df,
        rho=rho,
        p_value=boot.p_value(),
        tie_margin=tie_margin,
        wide=_wide(lo, hi, tie_margin),
    )
    object.__setattr__(out, "_boot", boot)
    return out


# --------------------------------------------------------------------------- crossovers


def _family_level(confidence: float, k: int) -> float:
    """Per-stage level that makes ``k`` independent intervals hold together at ``confidence`` (Sidak)."""
    return confidence ** (1.0 / max(1, k))


def _judge(
    comparisons: Sequence[StageComparison],
    confidence: float | None,
    family_wise: bool,
    ladder: Collection[int] | None,
) -> tuple[list[StageComparison], float, list[str]]:
    """Comparable stages in C order, the per-stage level used, and their verdicts at that level."""
    usable = sorted(
        (c for c in comparisons if c.delta is not None and _boot_of(c) is not None),
        key=lambda c: c.concurrency,
    )
    if not usable:
        return [], 0.0, []
    level = confidence if confidence is not None else usable[0].confidence
    k = sum(1 for c in usable if ladder is None or c.concurrency in ladder)
    stage_level = _family_level(level, k) if family_wise else level
    verdicts = []
    for c in usable:
        lo, hi = _boot_of(c).interval(stage_level)
        verdicts.append(_verdict(c.delta, lo, hi, c.margin, c.higher_is_better))
    return usable, stage_level, verdicts


def find_crossovers(
    comparisons: Sequence[StageComparison],
    *,
    family_wise: bool = True,
    confidence: float | None = None,
    ladder: Collection[int] | None = None,
) -> list[Crossover]:
    """Crossovers between consecutive significant stages of opposite verdict.

    ``confidence`` defaults to the comparisons' own.  With ``family_wise`` (the
    default) significance is judged with Sidak-adjusted intervals, at the
    per-stage level ``confidence ** (1/k)`` for ``k`` ladder stages, so all
    ``k`` intervals hold together with probability ``confidence``; each
    crossover's interval is taken at that same level.  Without it, the plain
    per-stage ``confidence`` is used for both.

    ``ladder`` lists the concurrencies of the planned ladder (default: every
    compared stage).  Only those can declare a crossover; other stages, added
    by :func:`refine_plan`, only help to place the crossovers they lie in.
    See the module doc.
    """
    usable, stage_level, verdicts = _judge(comparisons, confidence, family_wise, ladder)
    if not usable:
        return []
    level = confidence if confidence is not None else usable[0].confidence
    # stages outside the ladder (refinement) never declare
    verdicts = [v if ladder is None or c.concurrency in ladder else TIE for c, v in zip(usable, verdicts)]
    sig = [i for i, v in enumerate(verdicts) if v != TIE]

    out: list[Crossover] = []
    for i, j in zip(sig, sig[1:]):
        if verdicts[i] != verdicts[j]:
            out.append(_place(usable[i : j + 1], verdicts[i], level, stage_level, family_wise))
    return out


def _place(
    span: Sequence[StageComparison], low_verdict: str, level: float, stage_level: float, confirmed: bool
) -> Crossover:
    """Locate the zero of delta across ``span`` and its interval (see the module doc)."""
    xs = [math.log(c.concurrency) for c in span]
    increasing = span[-1].delta > span[0].delta
    boots = [_boot_of(c) for c in span]
    weights = [1.0 / max(b.var, 1e-12) for b in boots]

    # Estimate: zero of the monotone (isotonic) fit of the measured deltas,
    # interpolated linearly on log C.
    fit = stats.isotonic([c.delta for c in span], weights, increasing)
    x_hat = stats.monotone_zero(xs, fit, increasing)

    # Interval: every point of the span where the difference, interpolated on
    # log C between neighbouring stages, is not distinguishable from zero,
    # i.e. the bootstrap puts zero in neither of its (1 - level)/2 tails.
    reps = [b.replicates(stage_level) for b in boots]
    tail = (1.0 - stage_level) / 2.0
    segments = []
    for a_r, b_r in zip(reps, reps[1:]):
        # a + w (b - a) <= 0 holds always, never, for w <= w0 or for w >= w0
        always, up, down = 0, [], []
        for a, b in zip(a_r, b_r):
            if a <= 0.0 and b <= 0.0:
                always += 1
            elif a <= 0.0 < b:
                up.append(-a / (b - a))
            elif b <= 0.0 < a:
                down.append(a / (a - b))
        up.sort()
        down.sort()
        segments.append((always, up, down, min(len(a_r), len(b_r))))

    def inside(i: int, w: float) -> bool:
        always, up, down, n_rep = segments[i]
        below = always + len(up) - bisect.bisect_left(up, w) + bisect.bisect_right(down, w)
        p = below / n_rep
        return tail <= p <= 1.0 - tail

    steps = 32
    found: list[float] = []
    for i in range(len(span) - 1):
        x0, x1 = xs[i], xs[i + 1]
        prev_w, prev_in = 0.0, inside(i, 0.0)
        if prev_in:
            found.append(x0)
        for k in range(1, steps + 1):
            w = k / steps
            now = inside(i, w)
            if now != prev_in:
                a, b = prev_w, w  # refine the edge by bisection
                for _ in range(10):
                    m = 0.5 * (a + b)
                    if inside(i, m) == prev_in:
                        a = m
                    else:
                        b = m
                found.append(x0 + (b if now else a) * (x1 - x0))
            elif now and k == steps:
                found.append(x1)
            prev_w, prev_in = w, now
    lo = min(found + [x_hat])
    hi = max(found + [x_hat])
    # If delta is monotone across the span, the zero also lies between the last
    # stage significantly on one side and the first significantly on the other.
    for x, b in zip(xs, boots):
        d_lo, d_hi = b.interval(stage_level)
        # in the orientation where delta increases across the span
        g_lo, g_hi = (d_lo, d_hi) if increasing else (-d_hi, -d_lo)
        if x <= x_hat and g_hi < 0.0:
            lo = max(lo, x)
        if x >= x_hat and g_lo > 0.0:
            hi = min(hi, x)

    est = math.exp(x_hat)
    cs = [c.concurrency for c in span]
    below = [cc for cc in cs if cc <= est]
    above = [cc for cc in cs if cc > est]
    return Crossover(
        low_c=cs[0],
        high_c=cs[-1],
        estimate=est,
        ci_low=math.exp(lo),
        ci_high=math.exp(hi),
        direction=SPEC_TO_BASELINE if low_verdict == SPEC else BASELINE_TO_SPEC,
        confidence=level,
        stage_level=stage_level,
        confirmed=confirmed,
        span=cs,
        local_low_c=below[-1] if below else cs[0],
        local_high_c=above[0] if above else cs[-1],
    )


# --------------------------------------------------------------------------- one metric


def _by_concurrency(stages: Iterable[StageSamples] | Mapping[int, StageSamples], who: str) -> dict[int, StageSamples]:
    items = stages.values() if isinstance(stages, Mapping) else stages
    out: dict[int, StageSamples] = {}
    for s in items:
        if s.concurrency in out:
            raise ValueError(f"{who}: two stages at C={s.concurrency}")
        out[s.concurrency] = s
    return out


def _regions(comparisons: Sequence[StageComparison], family_wise: bool) -> list[Region]:
    out: list[Region] = []
    for c in comparisons:
        v = (c.family_verdict or TIE) if family_wise else c.verdict
        if out and out[-1].verdict == v:
            out[-1].high_c = c.concurrency
            out[-1].concurrencies.append(c.concurrency)
        else:
            out.append(Region(v, c.concurrency, c.concurrency, [c.concurrency]))
    return out


def analyze(
    metric_name: str,
    base_stages: Iterable[StageSamples] | Mapping[int, StageSamples],
    spec_stages: Iterable[StageSamples] | Mapping[int, StageSamples],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    margin: float = DEFAULT_MARGIN,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    family_wise: bool = True,
    ladder: Collection[int] | None = None,
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> MetricAnalysis:
    """Compare every concurrency both targets ran, find regions and crossovers.

    ``ladder``: the planned concurrencies (default: all stages); stages outside
    it were added by :func:`refine_plan` and only help to place crossovers.
    A planned concurrency that is not compared is missing from the verdict
    (:func:`recommendation` names it).  ``tie_margin``: see the module doc §3.
    """
    b = _by_concurrency(base_stages, "baseline")
    s = _by_concurrency(spec_stages, "spec")
    common = sorted(set(b) & set(s))
    unpaired = sorted(set(b) ^ set(s))
    if not common:
        raise ValueError(f"{metric_name}: the two targets share no concurrency")
    hib = b[common[0]].higher_is_better
    rho = stats.pooled_autocorrelation([b[c].samples for c in common] + [s[c].samples for c in common])
    comparisons = [
        compare_stage(b[c], s[c], confidence=confidence, margin=margin, n_boot=n_boot, seed=seed, rho=rho,
                      tie_margin=tie_margin)
        for c in common
    ]
    if any(c.higher_is_better != hib for c in comparisons):
        raise ValueError(f"{metric_name}: stages disagree on higher_is_better")
    judged, _, verdicts = _judge(comparisons, confidence, True, ladder)
    for c in comparisons:
        c.family_verdict = TIE
    for c, v in zip(judged, verdicts):
        c.family_verdict = v
    crossovers = find_crossovers(comparisons, family_wise=family_wise, confidence=confidence, ladder=ladder)
    candidates = []
    if family_wise:
        # per-stage flips that the whole-ladder standard does not confirm
        for x in find_crossovers(comparisons, family_wise=False, confidence=confidence, ladder=ladder):
            if not any(y.low_c <= x.low_c and x.high_c <= y.high_c for y in crossovers):
                x.confirmed = False
                candidates.append(x)
    return MetricAnalysis(
        metric=metric_name,
        higher_is_better=hib,
        confidence=confidence,
        margin=margin,
        family_wise=family_wise,
        comparisons=comparisons,
        regions=_regions(comparisons, family_wise),
        crossovers=crossovers,
        candidates=candidates,
        rho=rho,
        ladder=sorted(ladder) if ladder is not None else list(common),
        unpaired=unpaired,
        tie_margin=tie_margin,
    )


# --------------------------------------------------------------------------- refinement


def refine_plan(
    analysis: MetricAnalysis,
    max_width_ratio: float = 1.3,
    budget_stages: int = 4,
) -> list[int]:
    """The next concurrencies to measure to pin the crossovers down (may be empty).

    A crossover is settled when its interval is narrow (``ci_high / ci_low <=
    max_width_ratio``) and no gap between measured stages that overlaps the
    interval is wider than that ratio either (so the estimate does not rest
    on a long interpolation).  For each unsettled crossover, widest interval
    first, this proposes the geometric midpoint of the gap between measured
    stages that holds most of the interval (bisection on log concurrency
    between the stages bracketing it), skipping gaps with no integer inside;
    at most ``budget_stages`` in all.  Run them, call :func:`analyze` again with
    the same ``ladder`` and call this again with the budget that is left.
    """
    if budget_stages <= 0:
        return []
    measured = sorted(c.concurrency for c in analysis.comparisons)
    todo: list[tuple[float, int]] = []
    for x in analysis.crossovers:
        width = x.ci_high / x.ci_low
        # gaps between measured stages that the interval overlaps, by how much it overlaps them
        gaps = [
            (min(b, x.ci_high) / max(a, x.ci_low), a, b)
            for a, b in zip(measured, measured[1:])
            if a < x.ci_high and b > x.ci_low and b - a >= 2
        ]
        if width <= max_width_ratio and all(b / a <= max_width_ratio for _, a, b in gaps):
            continue
        if gaps:
            _, a, b = max(gaps)
            mid = min(max(int(round(math.sqrt(a * b))), a + 1), b - 1)
            todo.append((width, mid))
    todo.sort(key=lambda t: -t[0])
    out: list[int] = []
    for _, mid in todo:
        if mid not in out:
            out.append(mid)
    return sorted(out[:budget_stages])


# --------------------------------------------------------------------------- words


@dataclass
class Scope:
    """What a verdict rests on beyond the comparisons: the plan, and what went wrong where.

    :mod:`loadgen.analysis.compare` builds one per workload from a run's stages.
    ``planned``: the concurrencies the plan meant both targets to run.
    ``missing``: concurrency → why it was not measured by both targets
    ("spec not run", "spec cut in the warm-up at 41 s by an interrupt"); planned ones,
    and refinement stages that were cut.  ``flagged``: compared concurrency →
    short labels of what may have distorted its figures ("spec client-bound").
    ``cut``: how the run ended early ("the run was interrupted with 3 stages
    not run"), "" when it ran to its end.
    """

    planned: list[int]
    missing: dict[int, str] = field(default_factory=dict)
    flagged: dict[int, list[str]] = field(default_factory=dict)
    cut: str = ""


@dataclass
class Verdict:
    """A metric's verdict in words.

    ``kind``: "cross", "spec", "baseline", "tie" (every stage a measured tie),
    "inconclusive" (no winner anywhere and some tie is too wide to call),
    "spec-some", "baseline-some", "mixed" (flips seen only stage by stage),
    "not compared" (no stage measured by both targets).
    ``text``: what was found; ``caveat``: what it rests on (measured range
    against the plan, stages missing or flagged), "" when the whole plan was
    compared with nothing flagged.  ``everywhere``: the text claims a rule for
    every concurrency ("enabling it everywhere is safe"), allowed only when
    every planned stage was compared, none flagged, none inconclusive.
    """

    kind: str
    text: str
    caveat: str = ""
    everywhere: bool = False

    @property
    def sentence(self) -> str:
        return f"{self.text} {self.caveat}" if self.caveat else self.text


def _fmt_c(x: float) -> str:
    if x >= 10:
        return str(int(round(x)))
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _fmt_range(lo: int, hi: int) -> str:
    return f"C={lo}" if lo == hi else f"C={lo}–{hi}"


def _fmt_cs(cs: Iterable[int]) -> str:
    return "C=" + ", ".join(str(c) for c in sorted(cs))


def _runs(chosen: Collection[int], order: Sequence[int]) -> list[str]:
    """``chosen`` concurrencies as ranges of neighbours in ``order`` (the measured stages)."""
    out: list[list[int]] = []
    prev = None
    for c in order:
        if c in chosen:
            if out and prev in chosen:
                out[-1].append(c)
            else:
                out.append([c])
        prev = c
    return [_fmt_range(r[0], r[-1]) for r in out]


def _stage_scale(analysis: MetricAnalysis) -> float:
    """Family-level interval width over the per-stage one (Šidák level over the ladder, module doc §4)."""
    k = sum(1 for c in analysis.comparisons if c.delta is not None and c.concurrency in analysis.ladder) or 1
    level = _family_level(analysis.confidence, k)
    return stats.z_ppf(0.5 + level / 2.0) / stats.z_ppf(0.5 + analysis.confidence / 2.0)


def more_data_factor(c: StageComparison, family_scale: float = 1.0) -> float | None:
    """About how many times its windows a stage needs for its interval to narrow to ±tie_margin (module doc §3).

    The interval's half-width h (log scale) falls as 1/sqrt(windows), so it
    takes (h / log(1 + tie_margin))².  ``family_scale`` widens h for a stage
    that is significant alone but tied at the whole-ladder level, where it is
    judged.  None without an interval.
    """
    if c.delta is None or c.ci_low is None or c.ci_high is None:
        return None
    lo, hi = max(c.ci_low, -0.999999), c.ci_high
    h = (math.log1p(hi) - math.log1p(lo)) / 2.0 * (family_scale if c.verdict != TIE else 1.0)
    if h <= 0.0:
        return None
    return (h / math.log1p(c.tie_margin)) ** 2


def _times(f: float) -> str:
    if f < 10:
        return f"{max(2, math.ceil(f))}×"
    digits = 10 ** (len(str(int(f))) - 2)
    return f"{int(math.ceil(f / digits) * digits)}×"


def _why_inconclusive(analysis: MetricAnalysis, cs: Sequence[int]) -> str:
    """One sentence: why the ties at ``cs`` are inconclusive and how much more data would settle them."""
    by_c = {c.concurrency: c for c in analysis.comparisons}
    order = [c.concurrency for c in analysis.comparisons]
    scale = _stage_scale(analysis)
    without = [c for c in cs if by_c[c].ci_low is None]
    with_iv = [c for c in cs if by_c[c].ci_low is not None]
    m = f"±{by_c[cs[0]].tie_margin * 100:g} %"
    parts = []
    if with_iv:
        def width(c: int) -> float:
            x = by_c[c]
            return math.log1p(x.ci_high) - math.log1p(max(x.ci_low, -0.999999))

        w = max(with_iv, key=width)
        x = by_c[w]
        iv = f"[{x.ci_low * 100:+.1f}, {x.ci_high * 100:+.1f}] %"
        if len(with_iv) == 1:
            head = f"At C={w} the interval {iv} is wider than the {m} needed to call a tie"
        else:
            head = (f"At {', '.join(_runs(with_iv, order))} the intervals (widest {iv} at C={w}) are wider than "
                    f"the {m} needed to call a tie")
        factors = [f for f in (more_data_factor(by_c[c], scale) for c in with_iv) if f is not None]
        if factors:
            head += (f"; narrowing {'it' if len(with_iv) == 1 else 'them all'} to {m} would take about "
                     f"{_times(max(factors))} as many windows (longer windows or repeated stages)")
        parts.append(head)
    if without:
        parts.append(f"{'at' if parts else 'At'} {', '.join(_runs(without, order))} there were too few samples "
                     "for an interval")
    return "; ".join(parts) + "."


def _caveat(analysis: MetricAnalysis, scope: Scope | None) -> tuple[str, list[str]]:
    """(sentence naming what the verdict rests on, the reasons an everywhere-claim is not allowed)."""
    comps = analysis.comparisons
    compared = [c.concurrency for c in comps]
    measured = _fmt_range(compared[0], compared[-1])
    planned = sorted(scope.planned) if scope is not None else list(analysis.ladder)
    missing: dict[int, str] = dict(scope.missing) if scope is not None else {}
    for c in planned:
        if c not in compared and c not in missing:
            if scope is not None:  # both ran it (else scope.missing says so): the metric had too few samples
                missing[c] = "too few samples of this metric"
            else:
                missing[c] = "only one target measured it" if c in analysis.unpaired else "not measured"
    flagged = {c: scope.flagged[c] for c in compared if scope is not None and scope.flagged.get(c)}
    cut = scope.cut if scope is not None else ""
    bits, blockers = [], []
    if missing:
        all_cs = sorted(set(planned) | set(compared))
        by_why: dict[str, list[int]] = {}
        for c, why in sorted(missing.items()):
            by_why.setdefault(why, []).append(c)
        miss = "; ".join(f"{_fmt_cs(cs)} ({why})" for why, cs in by_why.items())
        of = f" of the planned {_fmt_range(all_cs[0], all_cs[-1])}" if planned else ""
        bits.append(f"Measured {measured}{of}; not measured by both targets: {miss}")
        blockers.append(f"{_fmt_cs(missing)} {'was' if len(missing) == 1 else 'were'} not compared")
    if cut:
        bits.append(("; " if bits else "") + cut)
    if flagged:
        by_label: dict[str, list[int]] = {}
        for c, labels in sorted(flagged.items()):
            for label in labels:
                by_label.setdefault(label, []).append(c)
        flag_txt = "; ".join(f"{label} at {_fmt_cs(cs)}" for label, cs in by_label.items())
        bits.append((". " if bits else "") + f"Flagged (figures may be distorted): {flag_txt}")
        n = len(flagged)
        blockers.append("every compared stage is flagged" if n == len(compared) and n > 1 else
                        f"{n} of the {len(compared)} compared stages {'is' if n == 1 else 'are'} flagged")
    text = "".join(bits)
    if text:
        text = text[0].upper() + text[1:] + "."
    return text, blockers


def verdict(analysis: MetricAnalysis, scope: Scope | None = None) -> Verdict:
    """The verdict of one metric in plain words (see :class:`Verdict`), limited to what was measured.

    Without ``scope`` the analysis' ``ladder`` is taken as the plan (a planned
    concurrency that was not compared is missing) and no stage is flagged.
    """
    comps = analysis.comparisons
    name = analysis.metric
    if not comps:
        return Verdict(NOT_COMPARED, f"{name}: not compared: no stage was measured by both targets.")
    measured = _fmt_range(comps[0].concurrency, comps[-1].concurrency)
    order = [c.concurrency for c in comps]
    pct = f"{analysis.confidence * 100:g} %"
    xs = analysis.crossovers
    caveat, blockers = _caveat(analysis, scope)
    by_c = {c.concurrency: c for c in comps}

    def where(v: str) -> list[str]:
        return [_fmt_range(r.low_c, r.high_c) for r in analysis.regions if r.verdict == v]

    tied = [c for r in analysis.regions if r.verdict == TIE for c in r.concurrencies]
    # a tie inside a crossover's span is where it crosses: the crossover's interval already says how sure
    unsure = [c for c in tied if by_c[c].wide and not any(x.low_c < c < x.high_c for x in xs)]
    sure = [c for c in tied if not by_c[c].wide]
    why = (" " + _why_inconclusive(analysis, unsure)) if unsure else ""
    if unsure:
        blockers.append(f"{_fmt_cs(unsure)} {'is' if len(unsure) == 1 else 'are'} inconclusive")

    def interval(x: Crossover) -> str:
        return f"{pct} interval {_fmt_c(x.ci_low)}–{_fmt_c(x.ci_high)}"

    def gap(x: Crossover) -> str:
        if x.local_high_c / x.local_low_c <= 1.5:
            return ""
        return (
            f" It was interpolated between C={x.local_low_c} and C={x.local_high_c}; "
            "measuring stages between them would place it better."
        )

    def elsewhere() -> str:
        """How the stages without a winner read: 'tied', 'inconclusive' or both."""
        if not unsure:
            return " and tied elsewhere"
        if sure:
            return f", tied at {', '.join(_runs(sure, order))} and inconclusive at {', '.join(_runs(unsure, order))}"
        return " and inconclusive elsewhere"

    spec_at, base_at = where(SPEC), where(BASELINE)
    if len(xs) == 1:
        x = xs[0]
        if x.direction == SPEC_TO_BASELINE:
            text = (f"{name}: enable speculation below C≈{_fmt_c(x.estimate)} ({interval(x)}); above it the "
                    f"baseline is better (measured {measured}).")
        else:
            text = (f"{name}: enable speculation above C≈{_fmt_c(x.estimate)} ({interval(x)}); below it the "
                    f"baseline is better (measured {measured}).")
        return Verdict("cross", text + gap(x) + why, caveat)
    if len(xs) > 1:
        parts = [
            f"{'stops' if x.direction == SPEC_TO_BASELINE else 'starts'} paying off at C≈{_fmt_c(x.estimate)} ({interval(x)})"
            for x in xs
        ]
        text = (
            f"{name}: {len(xs)} crossovers — speculation {', then '.join(parts)}. "
            f"Speculation is better at {', '.join(spec_at) or 'no measured stage'}; "
            f"the baseline at {', '.join(base_at) or 'no measured stage'} (measured {measured})."
        )
        return Verdict("cross", text + why, caveat)
    if analysis.candidates:
        hints = ", ".join(
            f"C≈{_fmt_c(x.estimate)} (between C={x.low_c} and C={x.high_c})" for x in analysis.candidates
        )
        text = (
            f"{name}: no crossover confirmed over the whole ladder ({measured}); stage by stage the better target "
            f"seems to change near {hints}, but not clearly enough to rely on. Measure longer or repeat those stages."
        )
        return Verdict("mixed", text, caveat)
    if spec_at and not base_at:
        if len(spec_at) == 1 and spec_at[0] == measured:
            return Verdict("spec", f"{name}: speculation wins at every measured concurrency ({measured}); no crossover.",
                           caveat)
        if not blockers:
            return Verdict("spec-some", f"{name}: speculation is better at {', '.join(spec_at)} and tied elsewhere in "
                           f"{measured}; it never loses, so enabling it everywhere is safe; no crossover.", caveat,
                           everywhere=True)
        return Verdict("spec-some", f"{name}: speculation is better at {', '.join(spec_at)}{elsewhere()} in {measured}; "
                       f"it lost at no measured stage, but that does not show enabling it everywhere is safe: "
                       f"{'; '.join(blockers)}; no crossover.{why}", caveat)
    if base_at and not spec_at:
        if len(base_at) == 1 and base_at[0] == measured:
            return Verdict("baseline", f"{name}: the baseline wins at every measured concurrency ({measured}); do not "
                           "enable speculation.", caveat)
        never = "speculation never wins" if not blockers else "speculation won at no measured stage"
        return Verdict("baseline-some", f"{name}: the baseline is better at {', '.join(base_at)}{elsewhere()} in "
                       f"{measured}; {never}; no crossover.{why}", caveat)
    if not unsure:
        return Verdict("tie", f"{name}: no difference beyond the noise at any measured concurrency ({measured}); "
                       "no crossover.", caveat)
    if not sure:
        return Verdict(INCONCLUSIVE, f"{name}: inconclusive at every measured concurrency ({measured}): no stage "
                       f"shows a difference that holds over the whole ladder, but none rules one out; no crossover.{why}", caveat)
    return Verdict(INCONCLUSIVE, f"{name}: no difference beyond the noise at {', '.join(_runs(sure, order))}, "
                   f"inconclusive at {', '.join(_runs(unsure, order))} ({measured}); no crossover.{why}", caveat)


def recommendation(analysis: MetricAnalysis, scope: Scope | None = None) -> str:
    """A plain-words sentence or two saying where to enable speculation, and what that rests on.

    See :func:`verdict`; this is its text followed by its caveat.
    """
    return verdict(analysis, scope).sentence
