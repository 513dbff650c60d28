"""One concurrency: both targets' per-window samples of one metric become a ``StageComparison``.

In: two ``StageSamples`` (baseline, spec) at the same concurrency, the level, margins, seed and
the pooled ``rho``. Out: the relative difference of their means, its bootstrap interval, p-value
and per-stage verdict, with the bootstrap's inputs kept on the comparison (loadgen.analysis.results).
The statistics are explained in loadgen.analysis.crossover §1-3.
"""

from __future__ import annotations

import math

from loadgen.analysis import stats
from loadgen.analysis.bootstrap import bootstrap
from loadgen.analysis.results import (
    BASELINE,
    DEFAULT_CONFIDENCE,
    DEFAULT_MARGIN,
    DEFAULT_N_BOOT,
    DEFAULT_TIE_MARGIN,
    SPEC,
    TIE,
    Bootstrap,
    StageComparison,
    StageSamples,
)


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


def _weights(s: StageSamples, xs: list[float], who: str) -> list[float] | None:
    if s.weights is None:
        return None
    ws = [float(w) for w in s.weights]
    if len(ws) != len(xs) or any(not math.isfinite(w) or w < 0.0 for w in ws) or (ws and math.fsum(ws) <= 0.0):
        raise ValueError(f"{who} stage C={s.concurrency}: weights must be one finite value >= 0 per sample, "
                         "not all zero")
    return ws


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
    paired: bool = False,
) -> StageComparison:
    """Compare one metric of the two targets at one concurrency (see the module doc).

    ``paired``: the two series are aligned window by window (loadgen.analysis.bootstrap.bootstrap).

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
    wb, ws = _weights(base, xb, "baseline"), _weights(spec, xs, "spec")
    mb = stats.weighted_mean(xb, wb) if xb else 0.0
    ms = stats.weighted_mean(xs, ws) if xs else 0.0

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
    inputs = Bootstrap(xb, xs, seed, n_boot, paired and len(xb) == len(xs), wb, ws)
    boot, lb, ls = bootstrap(c, rho, *inputs.key())
    df = boot.df
    delta = ms / mb - 1.0
    lo, hi = boot.interval(confidence)
    return StageComparison(
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
        bootstrap=inputs,
    )
