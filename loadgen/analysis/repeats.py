"""Repeated passes (``--repeat N``): how far each stage's figure moves from one pass to the next.

In: one metric's per-window samples of every pass of a run (its stages' ``repeat``), per target and
concurrency, and the pair the run compares. Out: a :class:`PassSpread`: per target and C the figure of
each pass (the mean of that pass's window samples: the quantity the comparison sets against the other
target's) and its coefficient of variation across the passes; per C the relative difference each pass
measured on its own, and whether the passes disagree more than each pass's own interval says.

Why the last: the comparison's interval comes from the windows of the pooled passes. If the server
varies between passes more than within a window of one (acceptance that depends on the run: vLLM's
fixed-seed throughput varied 9.85 % at C=1 and 19.65 % at C=2 across runs, #53436), that interval is
narrower than the truth, and a winner read from it claims more than was measured. The test: the
passes' log ratios scatter with a sample variance s²; each pass's bootstrap gives its own standard error;
if those errors were all there is, (k−1)·s²/mean(SE²) follows χ² with k−1 degrees of freedom; a value
past its 99 % quantile (:data:`LEVEL`) flags the stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadgen.analysis import stats
from loadgen.analysis.comparison import compare_stage
from loadgen.analysis.results import StageSamples

N_BOOT = 500
"""Replicates of each pass's own comparison: enough for its standard error (an interval's width to ~3 %)."""
LEVEL = 0.99
"""The χ² test's level, stricter than a run's 90 %: it runs at every compared stage of every metric (16 of
them in the README's run), and at 90 % one steady synthetic run of 4 passes was flagged at 1 of 2 stages."""


@dataclass(frozen=True)
class Spread:
    """One target at one concurrency: the figure of each pass, in pass order."""

    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return stats.mean(self.values)

    @property
    def sd(self) -> float:
        n = len(self.values)
        if n < 2:
            return 0.0
        m = self.mean
        return math.sqrt(math.fsum((x - m) ** 2 for x in self.values) / (n - 1))

    @property
    def cv(self) -> float | None:
        """Sample standard deviation over the mean (None for one pass or a zero mean)."""
        return self.sd / self.mean if len(self.values) > 1 and self.mean > 0 else None


@dataclass(frozen=True)
class PassDeltas:
    """One concurrency: the relative difference (spec / baseline − 1) each pass measured, and how the passes'
    scatter compares with what each pass's windows say."""

    deltas: tuple[float, ...]
    between_sd: float
    """Sample SD of the passes' log ratios."""
    within_se: float
    """Root mean square of each pass's own standard error of its log ratio (from its bootstrap interval)."""
    beyond: bool
    """The passes scatter more than their windows allow (χ² test at :data:`LEVEL`)."""

    @property
    def spread_words(self) -> str:
        return f"SD {100 * self.between_sd:.1f} % across passes vs {100 * self.within_se:.1f} % within one"


@dataclass
class PassSpread:
    """One metric of one workload over the passes of a repeated run."""

    passes: int
    by_target: dict[str, dict[int, Spread]] = field(default_factory=dict)
    deltas: dict[int, PassDeltas] = field(default_factory=dict)

    def beyond(self) -> list[int]:
        """The concurrencies whose passes disagree more than one pass's interval says."""
        return sorted(c for c, d in self.deltas.items() if d.beyond)

    def to_dict(self) -> dict:
        return {"passes": self.passes,
                "by_target": {t: {str(c): {"values": list(s.values), "cv": s.cv} for c, s in per.items()}
                              for t, per in self.by_target.items()},
                "deltas": {str(c): {"deltas": list(d.deltas), "between_sd": d.between_sd, "within_se": d.within_se,
                                    "beyond": d.beyond} for c, d in self.deltas.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "PassSpread":
        return cls(int(d["passes"]),
                   {t: {int(c): Spread(tuple(s["values"])) for c, s in per.items()}
                    for t, per in (d.get("by_target") or {}).items()},
                   {int(c): PassDeltas(tuple(x["deltas"]), x["between_sd"], x["within_se"], x["beyond"])
                    for c, x in (d.get("deltas") or {}).items()})


def chi2_upper(k: int, q: float) -> float:
    """The ``q`` quantile of χ² with ``k`` degrees of freedom (Wilson–Hilferty; within 3 % of the exact one at
    k = 1, q = 0.9: 2.64 for 2.71, and closer as k grows)."""
    a = 2.0 / (9.0 * k)
    return k * (1.0 - a + stats.z_ppf(q) * math.sqrt(a)) ** 3


def pass_deltas(base: list[list[float]], spec: list[list[float]], c: int, higher_is_better: bool, *,
                confidence: float, seed: int = 0) -> PassDeltas | None:
    """Each pass's comparison at one C (``base[i]``, ``spec[i]``: pass i's window samples), their scatter and
    the test; None when fewer than two passes have samples on both sides."""
    deltas, logs, ses = [], [], []
    z = stats.z_ppf(0.5 + confidence / 2)
    for i, (xb, xs) in enumerate(zip(base, spec)):
        if len(xb) < 2 or len(xs) < 2:
            continue
        cmp = compare_stage(StageSamples(c, xb, higher_is_better), StageSamples(c, xs, higher_is_better),
                            confidence=confidence, n_boot=N_BOOT, seed=seed + i)
        if cmp.delta is None or cmp.ci_low is None or cmp.ci_high is None or cmp.delta <= -1 or cmp.ci_low <= -1:
            continue
        deltas.append(cmp.delta)
        logs.append(math.log1p(cmp.delta))
        ses.append((math.log1p(cmp.ci_high) - math.log1p(cmp.ci_low)) / (2 * z))
    if len(logs) < 2:
        return None
    k = len(logs) - 1
    m = stats.mean(logs)
    s2 = math.fsum((x - m) ** 2 for x in logs) / k
    se2 = stats.mean([s * s for s in ses])
    beyond = k * s2 / se2 > chi2_upper(k, LEVEL) if se2 > 0 else s2 > 0
    return PassDeltas(tuple(deltas), math.sqrt(s2), math.sqrt(se2), beyond)


def pass_spread(per_pass: dict[str, dict[int, dict[int, list[float]]]], base: str, spec: str,
                higher_is_better: bool, *, confidence: float, seed: int = 0) -> PassSpread | None:
    """``per_pass``: target → C → pass → that pass's window samples. None when no stage ran twice."""
    passes = max((len(p) for per in per_pass.values() for p in per.values()), default=0)
    if passes < 2:
        return None
    out = PassSpread(passes)
    for t, per in per_pass.items():
        for c, by_pass in sorted(per.items()):
            values = tuple(stats.mean(xs) for _, xs in sorted(by_pass.items()) if xs)
            if len(values) >= 2:
                out.by_target.setdefault(t, {})[c] = Spread(values)
    for c in sorted(set(per_pass.get(base, {})) & set(per_pass.get(spec, {}))):
        b, s = per_pass[base][c], per_pass[spec][c]
        both = sorted(set(b) & set(s))
        d = pass_deltas([b[r] for r in both], [s[r] for r in both], c, higher_is_better,
                        confidence=confidence, seed=seed)
        if d is not None:
            out.deltas[c] = d
    return out
