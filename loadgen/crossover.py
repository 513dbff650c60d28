"""Where does speculative decoding stop (or start) paying off?  The statistics.

DOCSTRING_PLACEHOLDER
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

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
    "DEFAULT_N_BOOT",
]

DEFAULT_CONFIDENCE = 0.90
DEFAULT_MARGIN = 0.01
DEFAULT_N_BOOT = 2000

SPEC = "spec"
BASELINE = "baseline"
TIE = "tie"
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
    ``ci_high`` bound it at ``confidence``.  ``verdict`` says who is better
    ("spec", "baseline") or "tie".  ``delta``/``ci_*``/``df`` are ``None`` when
    the stage could not be compared (``note`` says why); such a stage is a tie.
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
    note: str = ""


@dataclass
class Crossover:
    """A concurrency at which the better target changes.

    ``low_c``/``high_c`` are the measured stages with opposite, significant
    verdicts that bracket it (possibly with tied stages between them, listed
    in ``span``); ``estimate`` is where the interpolated difference crosses zero
    and ``ci_low``..``ci_high`` its interval at ``confidence``.  ``local_low_c``
    and ``local_high_c`` are the measured stages immediately around the
    estimate: between them the position rests on interpolation.
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
    """Everything :func:`analyze` found for one metric."""

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
    unpaired: list[int] = field(default_factory=list)


# --------------------------------------------------------------------------- bootstrap state


class _Boot:
    """Bootstrap state of one comparison (kept off the dataclass fields, so not serialized).

    ``log_ratio`` is log(mean_spec / mean_baseline); ``dev`` holds the bootstrap
    replicates of it minus ``log_ratio``, already corrected for the bootstrap's
    small-sample variance deflation; ``df`` the Welch-Satterthwaite degrees of
    freedom used to stretch them to a Student-t width.
    """

    __slots__ = ("log_ratio", "dev", "df", "var")

    def __init__(self, log_ratio: float, dev: list[float], df: float):
        self.log_ratio = log_ratio
        self.dev = dev
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
        lo = self.log_ratio + k * stats.percentile(self.dev, a)
        hi = self.log_ratio + k * stats.percentile(self.dev, 1.0 - a)
        return math.expm1(lo), math.expm1(hi)

    def replicates(self, level: float) -> list[float]:
        """Bootstrap replicates of delta, stretched for ``level``."""
        k = self.stretch(level)
        return [math.expm1(self.log_ratio + k * d) for d in self.dev]


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
    rng = random.Random(f"loadgen.crossover:refit:{c.concurrency}")
    b = _Boot(math.log1p(c.delta), [rng.gauss(0.0, sd) for _ in range(n_boot)], df)
    object.__setattr__(c, "_boot", b)
    return b


def _verdict(delta: float, lo: float, hi: float, margin: float, higher_is_better: bool) -> str:
    if lo <= 0.0 <= hi or abs(delta) < margin:
        return TIE
    return SPEC if (delta > 0.0) == higher_is_better else BASELINE


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
        return StageComparison(c, hib, len(xb), len(xs), mb, ms, delta, None, None, confidence, margin, TIE, note=note)

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
        rng = random.Random(f"loadgen.crossover:{seed}:{c}:{who}")
        n = len(xx)
        length = stats.block_length(n, rho)
        reps = stats.circular_block_bootstrap_means(xx, length, n_boot, rng)
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
    )
    object.__setattr__(out, "_boot", boot)
    return out


# --------------------------------------------------------------------------- crossovers


def _family_level(confidence: float, k: int) -> float:
    """Per-stage level that makes ``k`` independent intervals hold together at ``confidence`` (Sidak)."""
    return confidence ** (1.0 / max(1, k))


def find_crossovers(
    comparisons: Sequence[StageComparison],
    *,
    family_wise: bool = True,
    confidence: float | None = None,
) -> list[Crossover]:
    """Crossovers between consecutive significant stages of opposite verdict.

    ``confidence`` defaults to the comparisons' own.  With ``family_wise`` (the
    default) significance is judged with Sidak-adjusted intervals, at the
    per-stage level ``confidence ** (1/k)`` for ``k`` compared stages, so all
    ``k`` intervals hold together with probability ``confidence``; each
    crossover's interval is taken at that same level.  Without it, the plain
    per-stage ``confidence`` is used for both.  See the module doc.
    """
    usable = sorted(
        (c for c in comparisons if c.delta is not None and _boot_of(c) is not None),
        key=lambda c: c.concurrency,
    )
    if not usable:
        return []
    level = confidence if confidence is not None else usable[0].confidence
    stage_level = _family_level(level, len(usable)) if family_wise else level

    verdicts = []
    for c in usable:
        lo, hi = _boot_of(c).interval(stage_level)
        verdicts.append(_verdict(c.delta, lo, hi, c.margin, c.higher_is_better))
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

    def inside(i: int, w: float) -> bool:
        lo_r, hi_r = reps[i], reps[i + 1]
        below = sum(1 for a, b in zip(lo_r, hi_r) if a + w * (b - a) <= 0.0)
        p = below / len(lo_r)
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


def _regions(comparisons: Sequence[StageComparison]) -> list[Region]:
    out: list[Region] = []
    for c in comparisons:
        if out and out[-1].verdict == c.verdict:
            out[-1].high_c = c.concurrency
            out[-1].concurrencies.append(c.concurrency)
        else:
            out.append(Region(c.verdict, c.concurrency, c.concurrency, [c.concurrency]))
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
) -> MetricAnalysis:
    """Compare every concurrency both targets ran, find regions and crossovers."""
    b = _by_concurrency(base_stages, "baseline")
    s = _by_concurrency(spec_stages, "spec")
    common = sorted(set(b) & set(s))
    unpaired = sorted(set(b) ^ set(s))
    if not common:
        raise ValueError(f"{metric_name}: the two targets share no concurrency")
    hib = b[common[0]].higher_is_better
    rho = stats.pooled_autocorrelation([b[c].samples for c in common] + [s[c].samples for c in common])
    comparisons = [
        compare_stage(b[c], s[c], confidence=confidence, margin=margin, n_boot=n_boot, seed=seed, rho=rho)
        for c in common
    ]
    if any(c.higher_is_better != hib for c in comparisons):
        raise ValueError(f"{metric_name}: stages disagree on higher_is_better")
    crossovers = find_crossovers(comparisons, family_wise=family_wise, confidence=confidence)
    candidates = []
    if family_wise:
        # per-stage flips that the whole-ladder standard does not confirm
        for x in find_crossovers(comparisons, family_wise=False, confidence=confidence):
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
        regions=_regions(comparisons),
        crossovers=crossovers,
        candidates=candidates,
        rho=rho,
        unpaired=unpaired,
    )


# --------------------------------------------------------------------------- refinement


def refine_plan(
    analysis: MetricAnalysis,
    max_width_ratio: float = 1.3,
    budget_stages: int = 4,
) -> list[int]:
    """The next concurrencies to measure to pin the crossovers down (may be empty).

    A crossover is settled when both its interval (``ci_high / ci_low``) and
    the gap between the measured stages around its estimate
    (``local_high_c / local_low_c``) are at most ``max_width_ratio``, or when
    no integer concurrency lies strictly between those stages.  For each
    unsettled crossover, widest first, this proposes the geometric midpoint of
    those two stages (bisection on log concurrency), at most
    ``budget_stages`` in all.  Call it again after running them, with the
    budget that is left.
    """
    if budget_stages <= 0:
        return []
    measured = {c.concurrency for c in analysis.comparisons}
    todo: list[tuple[float, int]] = []
    for x in list(analysis.crossovers) + list(analysis.candidates):
        a, b = x.local_low_c, x.local_high_c
        width = max(x.ci_high / x.ci_low, b / a)
        if width <= max_width_ratio:
            continue
        mid = int(round(math.sqrt(a * b)))
        if not a < mid < b:
            mid = a + 1 if b - a >= 2 else 0
        if mid and mid not in measured:
            todo.append((width, mid))
    todo.sort(key=lambda t: -t[0])
    out: list[int] = []
    for _, mid in todo:
        if mid not in out:
            out.append(mid)
    return sorted(out[:budget_stages])


# --------------------------------------------------------------------------- words


def _fmt_c(x: float) -> str:
    if x >= 10:
        return str(int(round(x)))
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _fmt_range(lo: int, hi: int) -> str:
    return f"C={lo}" if lo == hi else f"C={lo}–{hi}"


def recommendation(analysis: MetricAnalysis) -> str:
    """One or two plain-words sentences saying where to enable speculation."""
    comps = analysis.comparisons
    lo_all, hi_all = comps[0].concurrency, comps[-1].concurrency
    measured = _fmt_range(lo_all, hi_all)
    pct = f"{analysis.confidence * 100:g} %"
    verdicts = {c.verdict for c in comps}
    xs = analysis.crossovers
    name = analysis.metric

    def xo(x: Crossover) -> str:
        return f"C≈{_fmt_c(x.estimate)} ({pct} interval {_fmt_c(x.ci_low)}–{_fmt_c(x.ci_high)})"

    if len(xs) == 1:
        x = xs[0]
        if x.direction == SPEC_TO_BASELINE:
            return f"{name}: enable speculation below {xo(x)}; above it the baseline is better."
        return f"{name}: enable speculation above {xo(x)}; below it the baseline is better."
    if len(xs) > 1:
        spec_at = [_fmt_range(r.low_c, r.high_c) for r in analysis.regions if r.verdict == SPEC]
        base_at = [_fmt_range(r.low_c, r.high_c) for r in analysis.regions if r.verdict == BASELINE]
        parts = ", ".join(f"{xo(x)} where {'speculation stops' if x.direction == SPEC_TO_BASELINE else 'speculation starts'} paying off" for x in xs)
        return (
            f"{name}: {len(xs)} crossovers — {parts}. Speculation is better at "
            f"{', '.join(spec_at) or 'no measured stage'} and the baseline at {', '.join(base_at) or 'no measured stage'}."
        )
    if verdicts == {SPEC}:
        return f"{name}: speculation wins at every measured concurrency ({measured}); no crossover."
    if verdicts == {BASELINE}:
        return f"{name}: the baseline wins at every measured concurrency ({measured}); do not enable speculation."
    if verdicts == {TIE}:
        return f"{name}: no difference beyond the noise at any measured concurrency ({measured}); no crossover."
    spec_at = [_fmt_range(r.low_c, r.high_c) for r in analysis.regions if r.verdict == SPEC]
    base_at = [_fmt_range(r.low_c, r.high_c) for r in analysis.regions if r.verdict == BASELINE]
    if spec_at and base_at:
        return (
            f"{name}: speculation is better at {', '.join(spec_at)} and the baseline at {', '.join(base_at)}, "
            "but no crossover is confirmed once the whole ladder is taken into account; "
            "measure more windows or repeat those stages before relying on it."
        )
    if spec_at:
        return (
            f"{name}: speculation is better at {', '.join(spec_at)} and tied elsewhere in {measured}; "
            "enabling it costs nothing measurable; no crossover."
        )
    return (
        f"{name}: the baseline is better at {', '.join(base_at)} and tied elsewhere in {measured}; "
        "speculation gains nothing measurable there; no crossover."
    )
