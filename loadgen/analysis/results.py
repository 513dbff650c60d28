"""The typed results of the crossover analysis, and their JSON form.

In: nothing computed here; the analysis modules fill these. Out: ``StageSamples`` (what a
comparison is made of), ``StageComparison`` (one concurrency, with the ``Bootstrap`` inputs
that regenerate its replicates), ``Crossover``, ``Region`` and ``MetricAnalysis`` (one metric),
each with ``to_dict`` / ``from_dict``. ``to_dict`` is ``dataclasses.asdict``: crossover.json's
``analysis`` entries keep the shape loadgen/report and loadgen/cli read.

A comparison carries its bootstrap's inputs (the per-window samples of both targets, the
seed and the number of replicates; the pooled ``rho`` is a field already), not the 2000
replicates: a comparison reloaded from crossover.json regenerates exactly the replicates
of the live one (loadgen.analysis.bootstrap), so crossovers re-derived from it have the same
intervals. For the before-crossover run's 7 metrics × 8 stages the samples add ~60 kB to
crossover.json, the replicates would have added ~2.5 MB.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

DEFAULT_CONFIDENCE = 0.90
DEFAULT_MARGIN = 0.01
# A tie is called only when the interval lies inside ±5 % (loadgen.analysis.crossover §3); wider, it is inconclusive.
DEFAULT_TIE_MARGIN = 0.05
DEFAULT_N_BOOT = 2000

SPEC = "spec"
BASELINE = "baseline"
TIE = "tie"
INCONCLUSIVE = "inconclusive"
NOT_COMPARED = "not compared"
SPEC_TO_BASELINE = "spec_to_baseline"
BASELINE_TO_SPEC = "baseline_to_spec"


def _known(cls, d: dict) -> dict:
    """The keys of ``d`` that are fields of ``cls`` (a file written by a later version may have more)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def level(confidence: float) -> str:
    """A confidence level as a percentage to three figures: 0.9 → "90", 0.975 → "97.5", 1 − 0.1/3 → "96.7"."""
    return f"{confidence * 100:.3g}"


@dataclass
class Bootstrap:
    """What regenerates a comparison's bootstrap replicates exactly (loadgen.analysis.bootstrap).

    ``baseline`` and ``spec``: the per-window samples compared (checked floats, in time order);
    ``seed``: the analysis seed (the seed strings add the concurrency and the target);
    ``n_boot``: replicates per target. The pooled, clamped ``rho`` is the comparison's own field.
    """

    baseline: list[float]
    spec: list[float]
    seed: int = 0
    n_boot: int = DEFAULT_N_BOOT
    paired: bool = False
    """The two series are aligned window by window (an open loop's targets ran one schedule: window k
    of each holds the same planned arrivals), so both are resampled at the same windows."""
    weights_baseline: list[float] | None = None
    weights_spec: list[float] | None = None
    """Per-window weights (requests in the window) when the compared figure is a per-request one: each
    side's mean is then sum w x / sum w (StageSamples.weights)."""

    def key(self) -> tuple:
        """Hashable form, for the cache of regenerated replicates."""
        wb = tuple(self.weights_baseline) if self.weights_baseline is not None else None
        ws = tuple(self.weights_spec) if self.weights_spec is not None else None
        return tuple(self.baseline), tuple(self.spec), self.seed, self.n_boot, self.paired, wb, ws


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
    weights: list[float] | None = None
    """One per sample: the requests behind it, when the figure compared is per request (a mean or
    percentile over the requests planned in each window of an open loop). The stage's value is then the
    weighted mean, sum w x / sum w: for a per-window mean of E2E that is the mean over the stage's
    requests, as the simulator's truth and the stage table hold it. Equal weights leaned towards light
    windows: at 20 req/s on the simulator, ~0.5 points of E2E difference, half the interval's sd."""


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
    bootstrap: Bootstrap | None = None
    """The bootstrap's inputs (None when the stage could not be compared, or in files from before them:
    those get a normal approximation of the recorded interval, loadgen.analysis.bootstrap.boot_of)."""

    def __post_init__(self) -> None:
        if isinstance(self.bootstrap, dict):  # StageComparison(**d) on a dict read from JSON
            self.bootstrap = Bootstrap(**_known(Bootstrap, self.bootstrap))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StageComparison":
        return cls(**_known(cls, d))


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Crossover":
        return cls(**_known(cls, d))


@dataclass
class Region:
    """Consecutive measured stages with the same verdict."""

    verdict: str
    low_c: int
    high_c: int
    concurrencies: list[int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Region":
        return cls(**_known(cls, d))


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
    to_stages: bool = False
    """A crossover's interval is widened to the stages around each gap it reaches into: its ends are
    measured stages, never points interpolated between them (the rate axis, loadgen.analysis.locate)."""

    def to_dict(self) -> dict[str, Any]:
        """crossover.json's ``analysis`` entry (``dataclasses.asdict``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MetricAnalysis":
        d = _known(cls, d)
        d["comparisons"] = [StageComparison.from_dict(c) for c in d.get("comparisons", [])]
        d["regions"] = [Region.from_dict(r) for r in d.get("regions", [])]
        d["crossovers"] = [Crossover.from_dict(x) for x in d.get("crossovers", [])]
        d["candidates"] = [Crossover.from_dict(x) for x in d.get("candidates", [])]
        return cls(**d)


@dataclass(frozen=True)
class Checked:
    """One of the embedded simulator's own answers beside the one the analysis reported (loadgen.analysis.truth):
    a crossover, a switch of the policy, an adaptive configuration's gap to the envelope, each on either axis.
    ``mark``: ✓ (inside the reported interval), ≈ (within the practical margin of it), ✗ (outside it, or the
    simulator has no such point: the reported one is a false alarm); ``words``: the sentence the terminal and the
    page print after the mark."""

    mark: str
    words: str
    true: float | None
    """The simulator's own value (a C, a rate, a relative gap); None where it has none."""
    covered: bool
    label: str = ""
    """The configuration it is about (an adaptive one's gap, the configuration a switch leaves); "" for a
    crossover of the reference against the candidate."""
    at: float | None = None
    """The C or the rate it is about (a gap); None for a crossover or a switch."""
    envelope: str = ""
    """A gap's: the simulator's best fixed configuration there."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Checked":
        return cls(**_known(cls, d))
