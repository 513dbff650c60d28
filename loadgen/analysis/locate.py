"""A ladder of comparisons of one metric: verdicts at the whole-ladder level, regions, crossovers.

In: ``StageSamples`` of both targets over the ladder (``analyze``), or comparisons already made
(``find_crossovers``, ``judge``, e.g. reloaded from crossover.json). Out: a ``MetricAnalysis``:
the comparisons with their simultaneous (Šidák) verdicts, regions of equal verdict, confirmed
crossovers with their estimate and interval, and candidates seen only stage by stage.
How and why: loadgen.analysis.crossover §4.
"""

from __future__ import annotations

import bisect
import math
from typing import Collection, Iterable, Mapping, Sequence

from loadgen.analysis import stats
from loadgen.analysis.bootstrap import boot_of
from loadgen.analysis.comparison import _verdict, compare_stage
from loadgen.analysis.results import (
    BASELINE_TO_SPEC,
    DEFAULT_CONFIDENCE,
    DEFAULT_MARGIN,
    DEFAULT_N_BOOT,
    DEFAULT_TIE_MARGIN,
    SPEC,
    SPEC_TO_BASELINE,
    TIE,
    Crossover,
    MetricAnalysis,
    Region,
    StageComparison,
    StageSamples,
)


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
        (c for c in comparisons if c.delta is not None and boot_of(c) is not None),
        key=lambda c: c.concurrency,
    )
    if not usable:
        return [], 0.0, []
    level = confidence if confidence is not None else usable[0].confidence
    k = sum(1 for c in usable if ladder is None or c.concurrency in ladder)
    stage_level = _family_level(level, k) if family_wise else level
    verdicts = []
    for c in usable:
        lo, hi = boot_of(c).interval(stage_level)
        verdicts.append(_verdict(c.delta, lo, hi, c.margin, c.higher_is_better))
    return usable, stage_level, verdicts


def find_crossovers(
    comparisons: Sequence[StageComparison],
    *,
    family_wise: bool = True,
    confidence: float | None = None,
    ladder: Collection[int] | None = None,
    to_stages: bool = False,
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
    ``to_stages``: each interval reaches out to the measured stages around it (``_place``).
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
            out.append(_place(usable[i : j + 1], verdicts[i], level, stage_level, family_wise, to_stages))
    return out


def _place(
    span: Sequence[StageComparison], low_verdict: str, level: float, stage_level: float, confirmed: bool,
    to_stages: bool = False,
) -> Crossover:
    """Locate the zero of delta across ``span`` and its interval (see the module doc).

    ``to_stages``: the interval, found by interpolating the replicates between neighbouring stages, is
    widened to the stages on either side of every gap it reaches into. Interpolation assumes the
    difference is straight on log rate between two stages; towards saturation it bends sharply (the
    simulator's decode-rate difference: -5.7 % at 10 req/s, -1.1 % at 20, +12.8 % at 27, +33 % at 32),
    so the straight line put the zero at 20.5 where it is 21.2, and intervals interpolated inside the
    20-27 gap missed it in 1-3 of 12 seeds per metric. Only a rate measured inside the gap narrows it
    (``--refine`` adds such rates: loadgen.cli.rates.refine)."""
    xs = [math.log(c.concurrency) for c in span]
    increasing = span[-1].delta > span[0].delta
    boots = [boot_of(c) for c in span]
    weights = [1.0 / max(b.var, 1e-12) for b in boots]

    # Estimate: zero of the monotone (isotonic) fit of the measured deltas,
    # interpolated linearly on log C.
    fit = stats.isotonic([c.delta for c in span], weights, increasing)
    x_hat = stats.monotone_zero(xs, fit, increasing)

    # Interval: every point of the span where the difference, interpolated on
    # log C between neighbouring stages, is not distinguishable from zero,
    # i.e. the bootstrap puts zero in neither of its (1 - level)/2 tails.
    segments = _gap_segments([b.replicates(stage_level) for b in boots])
    found = _undistinguished_edges(segments, xs, (1.0 - stage_level) / 2.0)
    lo = min(found + [x_hat])
    hi = max(found + [x_hat])
    if to_stages:
        for x0, x1 in zip(xs, xs[1:]):
            if lo < x1 and hi > x0:
                lo, hi = min(lo, x0), max(hi, x1)
    lo, hi = _within_significant(lo, hi, xs, boots, x_hat, increasing, stage_level)

    est = math.exp(x_hat)
    cs = [c.concurrency for c in span]
    below = [cc for cc in cs if cc <= est]
    above = [cc for cc in cs if cc > est]
    return Crossover(
        low_c=cs[0],
        high_c=cs[-1],
        estimate=est,
        ci_low=_at(lo, span, xs),
        ci_high=_at(hi, span, xs),
        direction=SPEC_TO_BASELINE if low_verdict == SPEC else BASELINE_TO_SPEC,
        confidence=level,
        stage_level=stage_level,
        confirmed=confirmed,
        span=cs,
        local_low_c=below[-1] if below else cs[0],
        local_high_c=above[0] if above else cs[-1],
    )


_Segment = tuple[int, list[float], list[float], int]
"""One gap between neighbouring stages, for the replicate pairs (a, b) across it: how many are at or below zero
all along, the sorted weights w0 up to which a + w (b - a) <= 0 holds (pairs rising through zero), those from
which it holds (falling), and the number of pairs."""


def _gap_segments(reps: Sequence[Sequence[float]]) -> list[_Segment]:
    """Each gap's replicate pairs sorted by where their interpolated difference crosses zero (``_Segment``)."""
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
    return segments


def _undistinguished_edges(segments: Sequence[_Segment], xs: Sequence[float], tail: float) -> list[float]:
    """The log-C points where the interpolated difference enters or leaves being indistinguishable from zero
    (zero in neither ``tail`` of its replicates), each stage inside such a stretch included: a grid of 32 steps
    per gap, each edge refined by 10 bisections."""

    def inside(i: int, w: float) -> bool:
        always, up, down, n_rep = segments[i]
        below = always + len(up) - bisect.bisect_left(up, w) + bisect.bisect_right(down, w)
        p = below / n_rep
        return tail <= p <= 1.0 - tail

    steps = 32
    found: list[float] = []
    for i in range(len(xs) - 1):
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
    return found


def _within_significant(lo: float, hi: float, xs: Sequence[float], boots: Sequence, x_hat: float,
                        increasing: bool, stage_level: float) -> tuple[float, float]:
    """[lo, hi] cut to lie between the last stage significantly on one side of zero and the first significantly
    on the other (where delta is monotone across the span, the zero lies between them)."""
    for x, b in zip(xs, boots):
        d_lo, d_hi = b.interval(stage_level)
        # in the orientation where delta increases across the span
        g_lo, g_hi = (d_lo, d_hi) if increasing else (-d_hi, -d_lo)
        if x <= x_hat and g_hi < 0.0:
            lo = max(lo, x)
        if x >= x_hat and g_lo > 0.0:
            hi = min(hi, x)
    return lo, hi


def _at(x: float, span: Sequence[StageComparison], xs: Sequence[float]) -> float:
    """exp(x), or the measured stage itself where x is one (an end at 6.48 req/s reads 6.48, not 6.4799…)."""
    return next((c.concurrency for c, xc in zip(span, xs) if abs(xc - x) < 1e-12), math.exp(x))


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
    paired: bool = False,
    to_stages: bool = False,
) -> MetricAnalysis:
    """Compare every concurrency both targets ran, find regions and crossovers.

    ``paired``: at each stage the two series are aligned window by window (an open loop's one
    schedule); the autocorrelation that sets the bootstrap's blocks is then the per-window
    log ratio's, since what the windows share cancels in it.

    ``ladder``: the planned concurrencies (default: all stages); stages outside
    it were added by :func:`refine_plan` and only help to place crossovers.
    A planned concurrency that is not compared is missing from the verdict
    (:func:`recommendation` names it).  ``tie_margin``: see the module doc §3.
    ``to_stages``: crossover intervals end at measured stages (:func:`_place`).
    """
    b = _by_concurrency(base_stages, "baseline")
    s = _by_concurrency(spec_stages, "spec")
    common = sorted(set(b) & set(s))
    unpaired = sorted(set(b) ^ set(s))
    if not common:
        raise ValueError(f"{metric_name}: the two targets share no concurrency")
    hib = b[common[0]].higher_is_better
    if paired:
        # each stage its own: one stage near saturation drifts through its window (at 18 req/s on the
        # simulator the ratio fell from 0.83 to 0.55, lag-1 autocorrelation 0.8) while those below it
        # scatter about their mean; pooled, the drifting one's blocks widened every interval 3x
        ratios = {c: [math.log(y / x) for x, y in zip(b[c].samples, s[c].samples) if x > 0 and y > 0] for c in common}
        rhos = {c: stats.pooled_autocorrelation([ratios[c]]) for c in common}
        rho = stats.mean(list(rhos.values()))
    else:
        rho = stats.pooled_autocorrelation([b[c].samples for c in common] + [s[c].samples for c in common])
        rhos = {c: rho for c in common}
    comparisons = [
        compare_stage(b[c], s[c], confidence=confidence, margin=margin, n_boot=n_boot, seed=seed, rho=rhos[c],
                      tie_margin=tie_margin, paired=paired)
        for c in common
    ]
    if any(c.higher_is_better != hib for c in comparisons):
        raise ValueError(f"{metric_name}: stages disagree on higher_is_better")
    return judge(
        MetricAnalysis(
            metric=metric_name,
            higher_is_better=hib,
            confidence=confidence,
            margin=margin,
            family_wise=family_wise,
            comparisons=comparisons,
            regions=[],
            crossovers=[],
            rho=rho,
            ladder=sorted(ladder) if ladder is not None else list(common),
            unpaired=unpaired,
            tie_margin=tie_margin,
            to_stages=to_stages,
        ),
        ladder,
    )


def judge(a: MetricAnalysis, ladder: Collection[int] | None = None) -> MetricAnalysis:
    """``a`` with its family verdicts, regions, crossovers and candidates (re)derived from its comparisons.

    :func:`analyze` ends here; a comparison reloaded from crossover.json regenerates its bootstrap
    from its inputs, so judging a reloaded analysis again gives the live one's intervals.
    ``ladder``: the stages allowed to declare crossovers (None: every compared stage).
    """
    comparisons, confidence, family_wise = a.comparisons, a.confidence, a.family_wise
    judged, _, verdicts = _judge(comparisons, confidence, True, ladder)
    for c in comparisons:
        c.family_verdict = TIE
    for c, v in zip(judged, verdicts):
        c.family_verdict = v
    crossovers = find_crossovers(comparisons, family_wise=family_wise, confidence=confidence, ladder=ladder,
                                 to_stages=a.to_stages)
    candidates = []
    if family_wise:
        # per-stage flips that the whole-ladder standard does not confirm
        for x in find_crossovers(comparisons, family_wise=False, confidence=confidence, ladder=ladder,
                                 to_stages=a.to_stages):
            if not any(y.low_c <= x.low_c and x.high_c <= y.high_c for y in crossovers):
                x.confirmed = False
                candidates.append(x)
    a.regions = _regions(comparisons, family_wise)
    a.crossovers = crossovers
    a.candidates = candidates
    return a
