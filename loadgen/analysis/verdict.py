"""A metric's verdict in words, claiming no more than was measured.

In: a ``MetricAnalysis`` and the ``Scope`` it rests on (the plan, what is missing, flagged or
cut). Out: a ``Verdict``: its kind, the sentence (where to enable speculation) and the caveat;
``more_data_factor`` says how many more windows an inconclusive stage needs
(loadgen.analysis.crossover §3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Collection, Iterable, Sequence

from loadgen.analysis import stats
from loadgen.analysis.locate import _family_level
from loadgen.analysis.results import (
    BASELINE,
    INCONCLUSIVE,
    NOT_COMPARED,
    SPEC,
    SPEC_TO_BASELINE,
    TIE,
    Crossover,
    MetricAnalysis,
    StageComparison,
    level,
)


@dataclass
class Scope:
    """What a verdict rests on beyond the comparisons: the plan, and what went wrong where.

    :mod:`loadgen.analysis.compare` builds one per workload from a run's stages.
    ``planned``: the concurrencies the plan meant both targets to run.
    ``missing``: concurrency → why it was not compared
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
    detail: str = ""
    """What more the figures say beside the finding: why stages are inconclusive and what would settle
    them, where a crossover was interpolated (the terminal shows it for the deciding metric only)."""

    @property
    def sentence(self) -> str:
        return " ".join(x for x in (self.text, self.detail, self.caveat) if x)


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
        bits.append(f"Measured {measured}{of}; not compared: {miss}")
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


def verdict(analysis: MetricAnalysis, scope: Scope | None = None, *, advises: bool = True,
            worse_with_spec: str = "") -> Verdict:
    """The verdict of one metric in plain words (see :class:`Verdict`), limited to what was measured.

    Without ``scope`` the analysis' ``ladder`` is taken as the plan (a planned
    concurrency that was not compared is missing) and no stage is flagged.
    ``advises``: the workload's deciding metric, the one that says where to enable speculation; the others
    say where each target is better, and ``worse_with_spec`` (the metric's why) where the baseline is.
    """
    v = _verdict(analysis, scope, advises)
    if not advises and worse_with_spec and v.kind in ("baseline", "baseline-some", "cross"):
        v.text += f" Where speculation is worse here: {worse_with_spec}."
    return v


@dataclass
class _Reading:
    """What every verdict sentence of one metric draws on: the measured range, the caveat and what blocks an
    everywhere-claim, where each target won, the ties that are sure and those too wide to call (and why)."""

    name: str
    measured: str
    order: list[int]
    caveat: str
    blockers: list[str]
    spec_at: list[str]
    base_at: list[str]
    sure: list[int]
    unsure: list[int]
    why: str
    advises: bool

    def elsewhere(self) -> str:
        """How the stages without a winner read: 'tied', 'inconclusive' or both."""
        if not self.unsure:
            return " and tied elsewhere"
        if self.sure:
            return (f", tied at {', '.join(_runs(self.sure, self.order))} and inconclusive at "
                    f"{', '.join(_runs(self.unsure, self.order))}")
        return " and inconclusive elsewhere"


def _reading(analysis: MetricAnalysis, scope: Scope | None, advises: bool) -> _Reading:
    """The shared context of a metric's verdict (its comparisons are not empty)."""
    comps = analysis.comparisons
    caveat, blockers = _caveat(analysis, scope)
    by_c = {c.concurrency: c for c in comps}

    def where(v: str) -> list[str]:
        return [_fmt_range(r.low_c, r.high_c) for r in analysis.regions if r.verdict == v]

    tied = [c for r in analysis.regions if r.verdict == TIE for c in r.concurrencies]
    # a tie inside a crossover's span is where it crosses: the crossover's interval already says how sure
    unsure = [c for c in tied if by_c[c].wide and not any(x.low_c < c < x.high_c for x in analysis.crossovers)]
    sure = [c for c in tied if not by_c[c].wide]
    why = _why_inconclusive(analysis, unsure) if unsure else ""
    if unsure:
        blockers.append(f"{_fmt_cs(unsure)} {'is' if len(unsure) == 1 else 'are'} inconclusive")
    return _Reading(analysis.metric, _fmt_range(comps[0].concurrency, comps[-1].concurrency),
                    [c.concurrency for c in comps], caveat, blockers, where(SPEC), where(BASELINE), sure, unsure,
                    why, advises)


def _verdict(analysis: MetricAnalysis, scope: Scope | None, advises: bool = True) -> Verdict:
    """``advises``: the words say where to enable speculation; else what the metric shows (a latency
    percentile beside the deciding throughput explains: ITL p99 said "do not enable speculation" on the
    H200 beside a +35-43 % throughput win)."""
    if not analysis.comparisons:
        return Verdict(NOT_COMPARED, f"{analysis.metric}: not compared: no stage was measured by both targets.")
    r = _reading(analysis, scope, advises)
    if analysis.crossovers:
        return _crossing_verdict(analysis, r)
    if analysis.candidates:
        hints = ", ".join(
            f"C≈{_fmt_c(x.estimate)} (between C={x.low_c} and C={x.high_c})" for x in analysis.candidates
        )
        text = (
            f"{r.name}: no crossover confirmed over the whole ladder ({r.measured}); stage by stage the better target "
            f"seems to change near {hints}, but not clearly enough to rely on. Measure longer or repeat those stages."
        )
        return Verdict("mixed", text, r.caveat)
    if r.spec_at and not r.base_at:
        return _spec_side_verdict(r)
    if r.base_at and not r.spec_at:
        return _baseline_side_verdict(r)
    return _no_winner_verdict(r)


def _crossing_verdict(analysis: MetricAnalysis, r: _Reading) -> Verdict:
    """One crossover: which side of it to enable speculation on; several: where each starts or stops paying."""
    xs = analysis.crossovers
    pct = f"{level(analysis.confidence)} %"

    def interval(x: Crossover) -> str:
        return f"{pct} interval {_fmt_c(x.ci_low)}–{_fmt_c(x.ci_high)}"

    if len(xs) > 1:
        parts = [
            f"{'stops' if x.direction == SPEC_TO_BASELINE else 'starts'} paying off at C≈{_fmt_c(x.estimate)} ({interval(x)})"
            for x in xs
        ]
        text = (
            f"{r.name}: {len(xs)} crossovers — speculation {', then '.join(parts)}. "
            f"Speculation is better at {', '.join(r.spec_at) or 'no measured stage'}; "
            f"the baseline at {', '.join(r.base_at) or 'no measured stage'} (measured {r.measured})."
        )
        return Verdict("cross", text, r.caveat, detail=r.why)
    x = xs[0]
    at = f"C≈{_fmt_c(x.estimate)} ({interval(x)})"
    if x.direction == SPEC_TO_BASELINE:
        says = (f"enable speculation below {at}; above it the baseline is better" if r.advises else
                f"speculation is better below {at}; above it the baseline is")
    else:
        says = (f"enable speculation above {at}; below it the baseline is better" if r.advises else
                f"the baseline is better below {at}; speculation above it")
    text = f"{r.name}: {says} (measured {r.measured})."
    gap = "" if x.local_high_c / x.local_low_c <= 1.5 else (
        f"It was interpolated between C={x.local_low_c} and C={x.local_high_c}; "
        "measuring stages between them would place it better."
    )
    return Verdict("cross", text, r.caveat, detail=" ".join(p for p in (gap, r.why) if p))


def _spec_side_verdict(r: _Reading) -> Verdict:
    """Speculation better somewhere, the baseline nowhere: everywhere, or only at some stages."""
    name, measured = r.name, r.measured
    if len(r.spec_at) == 1 and r.spec_at[0] == measured:
        return Verdict("spec", f"{name}: speculation wins at every measured concurrency ({measured}); no crossover.",
                       r.caveat)
    if not r.blockers:
        return Verdict("spec-some", f"{name}: speculation is better at {', '.join(r.spec_at)} and tied elsewhere in "
                       f"{measured}; it never loses{', so enabling it everywhere is safe' if r.advises else ''}; "
                       "no crossover.", r.caveat, everywhere=r.advises)
    return Verdict("spec-some", f"{name}: speculation is better at {', '.join(r.spec_at)}{r.elsewhere()} in {measured}; "
                   "it lost at no measured stage"
                   + (f", but that does not show enabling it everywhere is safe: {'; '.join(r.blockers)}" if r.advises
                      else "") + "; no crossover.", r.caveat, detail=r.why)


def _baseline_side_verdict(r: _Reading) -> Verdict:
    """The baseline better somewhere, speculation nowhere: everywhere, or only at some stages."""
    name, measured = r.name, r.measured
    if len(r.base_at) == 1 and r.base_at[0] == measured:
        return Verdict("baseline", f"{name}: the baseline wins at every measured concurrency ({measured})"
                       + ("; do not enable speculation." if r.advises else "."), r.caveat)
    never = "speculation never wins" if not r.blockers else "speculation won at no measured stage"
    return Verdict("baseline-some", f"{name}: the baseline is better at {', '.join(r.base_at)}{r.elsewhere()} in "
                   f"{measured}; {never}; no crossover.", r.caveat, detail=r.why)


def _no_winner_verdict(r: _Reading) -> Verdict:
    """No winner at any stage: a measured tie everywhere, or inconclusive somewhere."""
    name, measured = r.name, r.measured
    if not r.unsure:
        return Verdict("tie", f"{name}: no difference beyond the noise at any measured concurrency ({measured}); "
                       "no crossover.", r.caveat)
    if not r.sure:
        return Verdict(INCONCLUSIVE, f"{name}: inconclusive at every measured concurrency ({measured}): no stage "
                       "shows a difference that holds over the whole ladder, but none rules one out; no crossover.",
                       r.caveat, detail=r.why)
    return Verdict(INCONCLUSIVE, f"{name}: no difference beyond the noise at {', '.join(_runs(r.sure, r.order))}, "
                   f"inconclusive at {', '.join(_runs(r.unsure, r.order))} ({measured}); no crossover.", r.caveat,
                   detail=r.why)


def recommendation(analysis: MetricAnalysis, scope: Scope | None = None) -> str:
    """A plain-words sentence or two saying where to enable speculation, and what that rests on.

    See :func:`verdict`; this is its text followed by its caveat.
    """
    return verdict(analysis, scope).sentence
