"""An open-loop run in rate terms: per rate and target what was offered and achieved, the crossovers
along the rate axis by latency and goodput, each target's saturation, and capacity under SLOs.

In: a results document whose stages are open-loop (each has ``rate`` and ``open_loop``), the
configurations (reference first), the confidence, and optionally percentile SLOs
(:class:`SloTerm`, ``ttft_p99=800ms,tpot_p50=40ms``). Out: :class:`RateAnalysis` (rates.json).

In an open loop every target carries the offered rate until it saturates, so throughput
cannot choose between them below that: the comparison is by latency (TTFT and E2E from the
planned send, TPOT, ITL) and goodput, through the concurrency analysis's machinery
(loadgen.analysis.locate: per-window samples, bootstrap, Šidák over the ladder) with the
rate as its axis. Saturation is read from each stage (loadgen.stage.saturation) and stated
as an interval between the last rate a target kept up with and the first it did not.

Capacity under SLOs: at each of a target's stages the margin is log(value / limit) of its
worst SLO, the value being the stage's percentile; its interval comes from a bootstrap over
the window's bins (their histograms resampled and merged), at the Šidák share of the
confidence over that target's stages; a saturated stage fails every latency SLO. The
capacity is where the margin's point curve first crosses zero, interpolated on log rate; its
interval is where the bands' ends cross zero. A stage whose dispatch lag was flagged is left
out (its load was not the one planned).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from loadgen.analysis import stats
from loadgen.analysis.compare import METRICS, CrossoverMetric, window_whole
from loadgen.analysis.configs import ConfigsResult, analyze_configs, envelope_word
from loadgen.analysis.coverage import sim_starved
from loadgen.analysis.crossover import StageSamples, analyze
from loadgen.analysis.results import BASELINE_TO_SPEC, Checked, MetricAnalysis, _known, level
from loadgen.errors import LoadgenError
from loadgen.histograms import Hist
from loadgen.stage.saturation import Saturation, saturation
from loadgen.stage.selfcheck import _buckets

RATE_METRICS = ("decode_rate", "e2e_planned_mean", "ttft_planned_p50", "ttft_planned_p99", "tpot_p50", "itl_p50",
                "itl_p99", "e2e_planned_p50", "e2e_planned_p99", "goodput_requests_per_s")
"""The metrics compared along the rate axis: the open loop's latencies and goodput (not throughput:
below saturation it is the offered rate for every target)."""
ENVELOPE_METRICS = ("e2e_planned_mean", "tpot_p50")
"""With three or more configurations, who is best at each rate and how close an adaptive one comes to the
envelope of the fixed ones, by these: below saturation an open loop's throughput is the offered rate for every
configuration, so what speculation (and switching it by load) changes is the time a request takes (E2E from
the planned send, the queueing a burst leaves included) and its decode pace (TPOT). Not a tail percentile: a
1 s bin of a 6 req/s schedule holds six requests, no p99."""


def _metric(name: str) -> CrossoverMetric:
    """A rate metric: a crossover metric, or a binned percentile the concurrency analysis does not compare
    (TPOT per window: in an open loop it is what speculation changes most)."""
    m = next((x for x in METRICS if x.name == name), None)
    if m is not None:
        return m
    from loadgen.metrics import BY_NAME, CrossoverSample

    if name == "e2e_planned_mean":
        # per window the mean over its completed requests: the same requests for both targets, so their
        # lengths cancel in the ratio, where a p50 may pick a different request on each side
        return CrossoverMetric(CrossoverSample(name, "E2E from plan mean", "ms", False, "ratio",
                                               ("e2e_planned_sum", "completed")))
    base, _, p = name.rpartition("_p")
    b = BY_NAME[base]
    return CrossoverMetric(CrossoverSample(name, f"{b.label} p{p}", b.unit, False, "percentile", (base,), float(p), 3))


SLO_METRIC = {"ttft": "ttft_planned", "e2e": "e2e_planned", "tpot": "tpot", "itl": "itl"}
"""An SLO key's metric: in an open loop TTFT and E2E are held from the planned send, the user's wait."""
N_BOOT = 400


@dataclass(frozen=True)
class SloTerm:
    """One capacity SLO: the stage's ``percentile`` of ``key`` (ttft, tpot, itl, e2e) at most ``limit_ms``."""

    key: str
    percentile: float
    limit_ms: float

    @classmethod
    def from_dict(cls, d: dict) -> "SloTerm":
        """As rates.json holds it (its ``text`` is derived)."""
        return cls(d["key"], float(d["percentile"]), float(d["limit_ms"]))

    @property
    def metric(self) -> str:
        return SLO_METRIC[self.key]

    @property
    def text(self) -> str:
        return f"{self.key.upper()} p{self.percentile:g} ≤ {self.limit_ms:g} ms"


_SLO = re.compile(r"^(ttft|tpot|itl|e2e)_p(\d+(?:\.\d+)?)$")


def parse_slos(text: str | None, flag: str = "--capacity") -> list[SloTerm]:
    """'ttft_p99=800ms,tpot_p50=40' → SloTerms (ms; a value may end in ms or s)."""
    if not text or not text.strip():
        raise LoadgenError(f"{flag}: give the SLOs, e.g. ttft_p99=800ms,tpot_p50=40ms")
    out = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        m = _SLO.match(key.strip().lower())
        if not sep or not m:
            raise LoadgenError(f"{flag}: {part.strip()!r} is not METRIC_pNN=LIMIT (metrics ttft, tpot, itl, e2e; "
                               "e.g. ttft_p99=800ms)")
        v = value.strip().lower()
        scale = 1000.0 if v.endswith("s") and not v.endswith("ms") else 1.0
        try:
            limit = float(v.removesuffix("ms").removesuffix("s")) * scale
        except ValueError:
            limit = float("nan")
        p = float(m.group(2))
        if not (math.isfinite(limit) and limit > 0) or not 0 < p < 100:
            raise LoadgenError(f"{flag}: {part.strip()!r}: the limit must be > 0 ms and the percentile in (0, 100)")
        out.append(SloTerm(m.group(1), p, limit))
    return out


@dataclass
class RatePoint:
    """One target's stage at one rate."""

    target: str
    rate: float
    planned_per_s: float | None
    ended_per_s: float | None
    output_tokens_per_s: float
    goodput_per_s: float
    figures: dict[str, float | None]
    """ttft_planned_p50/p99, tpot_p50/p99, itl_p50/p99, e2e_planned_p50/p99 (ms) of the stage."""
    lag_p99_ms: float | None
    lag_flagged: bool
    saturated: bool
    why: str = ""
    running_mean: float | None = None
    queued_mean: float | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "RatePoint":
        return cls(**_known(cls, d))


@dataclass
class Saturates:
    """Where a target stopped keeping up: between ``kept`` (the highest rate it kept up with below the first
    saturated one) and ``at`` (that first saturated rate); ``at`` None: not within the measured rates."""

    target: str
    kept: float | None
    at: float | None
    why: str = ""
    truth: float | None = None
    """On the embedded simulators: the simulator's own saturation rate (analysis/truth.py)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self) | {"words": self.words}
        if self.truth is None:
            del d["truth"]  # computed on the embedded simulators only
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Saturates":
        return cls(**_known(cls, d))

    @property
    def words(self) -> str:
        if self.at is None:
            return f"{self.target} kept up with every rate measured" + (f" (up to {self.kept:g} req/s)" if self.kept else "")
        if self.kept is None:
            return f"{self.target} saturated already at the lowest rate measured, {self.at:g} req/s ({self.why})"
        return f"{self.target} saturates between {self.kept:.3g} and {self.at:.3g} req/s ({self.why})"


@dataclass
class Capacity:
    """A target's highest rate meeting every SLO, with its interval; None ends where it was not reached."""

    target: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    measured: list[MarginAt] = field(default_factory=list)
    """Per rate measured, the worst SLO's margin and its band."""
    words: str = ""
    simulator_truth: Checked | None = None
    """On the embedded simulators: the simulator's own capacity (``true``), ✓ within ±15 % of the estimate."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["simulator_truth"] = self.simulator_truth.to_dict() if self.simulator_truth else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Capacity":
        d = _known(cls, d)
        d["measured"] = [MarginAt.from_dict(m) for m in d.get("measured") or []]
        d["simulator_truth"] = Checked.from_dict(d["simulator_truth"]) if d.get("simulator_truth") else None
        return cls(**d)


@dataclass
class MarginAt:
    """One stage of a capacity search: log(value / limit) of its worst SLO (``worst``: that SLO, or "saturated"),
    with its band; infinite (None in rates.json) where the stage saturated."""

    rate: float
    margin: float | None
    low: float | None
    high: float | None
    worst: str

    @classmethod
    def from_dict(cls, d: dict) -> "MarginAt":
        return cls(**_known(cls, d))


@dataclass
class RateMetric:
    """One metric of one candidate against the reference along the rate axis: its analysis and sentence."""

    label: str
    unit: str
    analysis: MetricAnalysis
    sentence: str
    simulator_truth: list[Checked] = field(default_factory=list)
    """On the embedded simulators: beside each reported crossover, the simulator's own (analysis/truth.py)."""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "unit": self.unit, "analysis": self.analysis.to_dict(), "sentence": self.sentence,
                "simulator_truth": [k.to_dict() for k in self.simulator_truth]}

    @classmethod
    def from_dict(cls, d: dict) -> "RateMetric":
        return cls(d["label"], d["unit"], MetricAnalysis.from_dict(d["analysis"]), d.get("sentence", ""),
                   [Checked.from_dict(k) for k in d.get("simulator_truth") or []])


@dataclass
class LeftOut:
    """A stage no comparison or capacity uses, and why."""

    target: str
    rate: float
    why: str


@dataclass
class RateAnalysis:
    reference: str
    candidates: list[str]
    confidence: float
    slos: list[SloTerm]
    points: dict[str, list[RatePoint]] = field(default_factory=dict)
    """Per workload."""
    saturation: dict[str, dict[str, Saturates]] = field(default_factory=dict)
    metrics: dict[str, dict[str, dict[str, RateMetric]]] = field(default_factory=dict)
    """Per workload and candidate (against the reference), per metric."""
    capacity: dict[str, dict[str, Capacity]] = field(default_factory=dict)
    capacity_sentence: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, list[LeftOut]] = field(default_factory=dict)
    """Per workload, the stages no comparison or capacity uses."""
    configs: dict[str, dict[str, ConfigsResult]] = field(default_factory=dict)
    """Per workload and metric (:data:`ENVELOPE_METRICS`), with three or more configurations: all of them at
    once along the rate axis (the envelope of the fixed ones, each adaptive one's gap to it, joint intervals)."""
    adaptive_sentences: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    """Per workload, adaptive configuration and metric: a sentence of its gap to the envelope by rate."""
    simulator_truth_error: str = ""
    """On the embedded simulators: why their own answers could not be computed ("" when they were, or no
    simulator ran)."""

    @property
    def labels(self) -> list[str]:
        """Every configuration, the reference first, then any target a point has that the roles do not name."""
        out = [self.reference, *self.candidates]
        out += list(dict.fromkeys(p.target for ps in self.points.values() for p in ps if p.target not in out))
        return out

    def to_dict(self) -> dict[str, Any]:
        d = {"axis": "rate", "reference": self.reference, "candidates": list(self.candidates),
             "confidence": self.confidence, "slos": [asdict(s) | {"text": s.text} for s in self.slos],
             "points": {wl: [asdict(p) for p in ps] for wl, ps in self.points.items()},
             "saturation": {wl: {t: s.to_dict() for t, s in per.items()} for wl, per in self.saturation.items()},
             "metrics": {wl: {c: {n: m.to_dict() for n, m in per.items()} for c, per in by.items()}
                         for wl, by in self.metrics.items()},
             "capacity": {wl: {t: c.to_dict() for t, c in per.items()} for wl, per in self.capacity.items()},
             "capacity_sentence": dict(self.capacity_sentence),
             "left_out": {wl: [asdict(x) for x in xs] for wl, xs in self.left_out.items()},
             "configs": {wl: {m: r.to_dict() for m, r in per.items()} for wl, per in self.configs.items()},
             "adaptive_sentences": self.adaptive_sentences}
        if self.simulator_truth_error:
            d["simulator_truth_error"] = self.simulator_truth_error
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RateAnalysis":
        return cls(d["reference"], list(d["candidates"]), d["confidence"],
                   [SloTerm.from_dict(s) for s in d.get("slos") or []],
                   {wl: [RatePoint.from_dict(p) for p in ps] for wl, ps in (d.get("points") or {}).items()},
                   {wl: {t: Saturates.from_dict(x) for t, x in per.items()}
                    for wl, per in (d.get("saturation") or {}).items()},
                   {wl: {c: {n: RateMetric.from_dict(m) for n, m in per.items()} for c, per in by.items()}
                    for wl, by in (d.get("metrics") or {}).items()},
                   {wl: {t: Capacity.from_dict(c) for t, c in per.items()}
                    for wl, per in (d.get("capacity") or {}).items()},
                   dict(d.get("capacity_sentence") or {}),
                   {wl: [LeftOut(x["target"], float(x["rate"]), x["why"]) for x in xs]
                    for wl, xs in (d.get("left_out") or {}).items()},
                   {wl: {m: ConfigsResult.from_dict(r) for m, r in per.items()}
                    for wl, per in (d.get("configs") or {}).items()},
                   d.get("adaptive_sentences") or {}, d.get("simulator_truth_error", ""))


def _point(s: dict, sat: Saturation) -> RatePoint:
    ol = s.get("open_loop") or {}
    fig = {f"{m}_p{p}": (s.get(m) or {}).get(f"p{p}") for m in ("ttft_planned", "tpot", "itl", "e2e_planned")
           for p in (50, 99)}
    run = ((s.get("server") or {}).get("checks") or {}).get("running") or {}
    return RatePoint(s["target"], float(s["rate"]), sat.planned_per_s, sat.ended_per_s, s.get("output_tokens_per_s", 0.0),
                     s.get("goodput_requests_per_s", 0.0), fig, (ol.get("dispatch_lag_ms") or {}).get("p99"),
                     bool(ol.get("lag_flagged")), sat.saturated, sat.why, run.get("running_mean"), run.get("queued_mean"))


def _workloads(s: dict) -> list[str]:
    return sorted(s.get("workloads", {})) or ["all"]


def _why_left_out(s: dict, sat: Saturation) -> str:
    if sim_starved(s):
        return "its embedded simulator was starved of CPU (it served slower than its model)"
    if not (s.get("open_loop") or {}).get("lag_flagged"):
        return "its window did not run whole"
    return "its dispatch lag was flagged (the schedule was not kept)" + (
        "; the server saturated all the same, which bounds its capacity" if sat.saturated and sat.servers else "")


def rate_analysis(doc: dict, labels: list[str], *, confidence: float = 0.90, slos: list[SloTerm] = (),
                  margin: float = 0.01, seed: int = 0, adaptive: list[str] = ()) -> RateAnalysis:
    """``adaptive``: the configurations that switch speculation by load on their own (never on the envelope)."""
    ref, cands = labels[0], labels[1:]
    out = RateAnalysis(ref, list(cands), confidence, list(slos))
    stages = [s for s in doc.get("stages", []) if s.get("open_loop") and s.get("rate") is not None]
    ladder = sorted({float(v) for v in (doc.get("run", {}).get("open_loop") or {}).get("ladder") or []}) or None
    for wl in sorted({w for s in stages for w in _workloads(s)}):
        mine = [s for s in stages if wl in _workloads(s)]
        # each stage's saturation read once (it decodes the stage's binned histograms): points, capacity
        sats = {id(s): saturation(s) for s in mine}
        out.points[wl] = sorted((_point(s, sats[id(s)]) for s in mine), key=lambda p: (labels.index(p.target)
                                                                          if p.target in labels else 99, p.rate))
        out.saturation[wl] = {t: _saturates(t, [p for p in out.points[wl] if p.target == t]) for t in labels}
        # measured as run: its window whole and its simulator, if embedded, not starved of CPU
        whole = [s for s in mine if window_whole(s) and not sim_starved(s)]
        usable = [s for s in whole if not (s.get("open_loop") or {}).get("lag_flagged")]
        out.left_out[wl] = [LeftOut(s["target"], float(s["rate"]), _why_left_out(s, sats[id(s)]))
                            for s in mine if s not in usable]
        # one stage per target and rate, the first measured (a capacity search's stages are one target's)
        first: dict[tuple[str, float], dict] = {}
        for s in sorted(usable, key=lambda s: s.get("stage_index", 0)):
            first.setdefault((s["target"], float(s["rate"])), s)
        if len(labels) >= 3:
            _all_at_once(out, wl, first, labels, adaptive, confidence, margin, seed, ladder)
        for cand in cands:
            per = {}
            rates = sorted(r for (t, r) in first if t == ref and (cand, r) in first)
            for name in RATE_METRICS:
                m = _metric(name)
                by: dict[str, list[StageSamples]] = {ref: [], cand: []}
                for r in rates:
                    sa, sb = aligned(m, _tl(first[(ref, r)], wl), _tl(first[(cand, r)], wl))
                    if len(sa.samples) >= 2:
                        sa.concurrency = sb.concurrency = r
                        by[ref].append(sa)
                        by[cand].append(sb)
                if not by[ref]:
                    continue
                common = [x.concurrency for x in by[ref]]
                a = analyze(name, by[ref], by[cand], confidence=confidence, margin=margin, seed=seed,
                            ladder=[r for r in ladder if r in common] if ladder else None, paired=True,
                            to_stages=True)
                per[name] = RateMetric(m.label, m.unit, a, rate_sentence(m.label, a, ref, cand))
            out.metrics.setdefault(wl, {})[cand] = per
        if slos:
            # a lag-flagged stage that saturated all the same is evidence too: its client offered less than
            # planned and the server still fell behind (a CI run lost the 30 req/s stage that bounded baseline's
            # capacity this way, and said only "above 12")
            held = usable + [s for s in whole if s not in usable and sats[id(s)].saturated and sats[id(s)].servers]
            caps = {t: capacity(t, [s for s in held if s["target"] == t], wl, slos, confidence, seed, sats=sats)
                    for t in labels}
            caps = {t: c for t, c in caps.items() if c is not None}
            out.capacity[wl] = caps
            out.capacity_sentence[wl] = capacity_sentence(caps, slos, ref, cands)
    return out


def _all_at_once(out: RateAnalysis, wl: str, first: dict[tuple[str, float], dict], labels: list[str],
                 adaptive: list[str], confidence: float, margin: float, seed: int, ladder: list[float] | None) -> None:
    """Every configuration at once along the rate axis, by each of :data:`ENVELOPE_METRICS`: at each rate all
    of them measured, on the bins where each has a value (one schedule: the same planned arrivals bin by bin)."""
    rates = sorted(r for (t, r) in first if t == labels[0] and all((x, r) in first for x in labels))
    for name in ENVELOPE_METRICS:
        m = _metric(name)
        by: dict[str, list[StageSamples]] = {x: [] for x in labels}
        for r in rates:
            cols = [per_bin(m, _tl(first[(x, r)], wl)) for x in labels]
            rows = [row for row in zip(*cols) if all(v is not None for v in row)]
            if len(rows) < 2:
                continue
            for k, x in enumerate(labels):
                vals, weights = [row[k][0] for row in rows], [row[k][1] for row in rows]
                by[x].append(StageSamples(r, vals, m.higher_is_better, weights if weights[0] is not None else None))
        if not by[labels[0]]:
            continue
        common = [st.concurrency for st in by[labels[0]]]
        res = analyze_configs(name, by, labels=labels, adaptive=adaptive, confidence=confidence, margin=margin,
                              seed=seed, ladder=[r for r in ladder if r in common] if ladder else None, paired=True,
                              to_stages=True)
        out.configs.setdefault(wl, {})[name] = res
        for x in res.adaptive:
            if x not in res.excluded:
                out.adaptive_sentences.setdefault(wl, {}).setdefault(x, {})[name] = envelope_sentence(res, x, m.label, margin)


def envelope_sentence(res: ConfigsResult, x: str, label: str, margin: float) -> str:
    """An adaptive configuration's gap to the envelope at each rate, by one metric, in one sentence."""
    parts = []
    for a in res.at:
        g = a.shortfall.get(x)
        if x not in a.means or g is None or g.delta is None:
            continue
        band = "" if g.ci_low is None else f" ({g.ci_low * 100:+.1f}…{g.ci_high * 100:+.1f} %)"
        parts.append(f"at {fmt_rate(a.concurrency)} req/s {g.delta * 100:+.1f} %{band} against {a.envelope_label}: "
                     f"{envelope_word(g, res.higher_is_better, margin)}")
    side = "higher is better" if res.higher_is_better else "lower is better"
    what = "; ".join(parts) if parts else "not compared at any rate"
    return f"{x} against the envelope of the fixed configurations by {label} ({side}, {level(res.confidence)} % joint): {what}"


def per_bin(m: CrossoverMetric, tl: dict) -> list[tuple[float, float | None] | None]:
    """A metric's (value, weight) in each of a timeline's bins, None where the bin has none (too few
    samples, no request), so two stages' bins can be set side by side. The weight is the requests behind
    a per-request figure (a mean's count, a percentile's samples), None for a rate over the bin's time."""
    s = m.spec
    if s.kind == "rate":
        return [(v / tl["bin_s"], None) for v in tl.get(s.series[0], [])]
    if s.kind == "ratio":
        return [(n / d, d) if d else None for n, d in zip(tl.get(s.series[0], []), tl.get(s.series[1], []))]
    out: list[tuple[float, float | None] | None] = []
    for text in tl.get(f"{s.series[0]}_hdr", []):
        h = Hist.decode(text, digits=2) if text else None
        ok = h is not None and h.count >= max(1, s.min_count)
        out.append((h.percentile(s.percentile) / 1000, float(h.count)) if ok else None)
    return out


def aligned(m: CrossoverMetric, tl_a: dict, tl_b: dict) -> tuple[StageSamples, StageSamples]:
    """Both stages' values at the bins where each has one (the same planned arrivals, window by window),
    weighted by their requests where the figure is per request (StageSamples.weights), with rate 0 as
    the concurrency until the caller sets it."""
    pairs = [(x, y) for x, y in zip(per_bin(m, tl_a), per_bin(m, tl_b)) if x is not None and y is not None]
    weighted = pairs and pairs[0][0][1] is not None
    hib = m.higher_is_better
    return tuple(StageSamples(0, [p[k][0] for p in pairs], hib, [p[k][1] for p in pairs] if weighted else None)
                 for k in (0, 1))


def _tl(s: dict, wl: str) -> dict:
    return (s.get("workloads", {}).get(wl) or s)["timeline"]


def _saturates(target: str, points: list[RatePoint]) -> Saturates:
    first = next((p for p in points if p.saturated), None)
    if first is None:
        return Saturates(target, max((p.rate for p in points), default=None), None)
    kept = max((p.rate for p in points if p.rate < first.rate and not p.saturated), default=None)
    return Saturates(target, kept, first.rate, first.why)


def fmt_rate(r: float) -> str:
    return f"{r:.3g}"


def rate_sentence(label: str, a, ref: str, cand: str) -> str:
    """"TPOT p50: spec is better below 7.9 req/s (90 % interval 6.8–9.1), ref above" and the like."""
    pct = f"{level(a.confidence)} %"
    parts = []
    for x in a.crossovers:
        first, then = (ref, cand) if x.direction == BASELINE_TO_SPEC else (cand, ref)
        parts.append(f"{first} is better below {fmt_rate(x.estimate)} req/s ({pct} interval "
                     f"{fmt_rate(x.ci_low)}–{fmt_rate(x.ci_high)}, between the measured {fmt_rate(x.low_c)} and "
                     f"{fmt_rate(x.high_c)}), {then} above")
    if parts:
        return f"{label}: " + "; ".join(parts) + "."
    wins = {c.family_verdict or c.verdict for c in a.comparisons}
    rates = sorted(c.concurrency for c in a.comparisons)
    # "compared", not "measured": a rate whose stages were not comparable is in no comparison (a ladder
    # of 2 and 5 req/s compared at 5 alone read "at every rate measured (5–5 req/s)")
    if len(rates) > 1:
        every, span = "every rate compared", f"{fmt_rate(rates[0])}–{fmt_rate(rates[-1])} req/s"
    else:
        every, span = "the one rate compared", f"{fmt_rate(rates[0])} req/s" if rates else "no rate"
    named = {"spec": cand, "baseline": ref}
    if wins == {"spec"} or wins == {"baseline"}:
        return f"{label}: {named[wins.pop()]} is better at {every} ({span})."
    if wins <= {"tie", "inconclusive", "not compared"}:
        where = "any rate compared" if len(rates) > 1 else every
        return f"{label}: {ref} and {cand} are not told apart at {where} ({span})."
    one = wins - {"tie", "inconclusive", "not compared"}
    if len(one) == 1:
        w = one.pop()
        at = [fmt_rate(c.concurrency) for c in a.comparisons if (c.family_verdict or c.verdict) == w]
        rest = [fmt_rate(c.concurrency) for c in a.comparisons if (c.family_verdict or c.verdict) != w]
        return (f"{label}: {named[w]} is better at {', '.join(at)} req/s; not told apart at {', '.join(rest)} "
                f"(no rate where {named['spec' if w == 'baseline' else 'baseline']} is better).")
    return (f"{label}: no confirmed crossover over {span}; by stage: "
            + ", ".join(f"{fmt_rate(c.concurrency)}: {c.family_verdict or c.verdict}" for c in a.comparisons) + ".")


# --- capacity ---------------------------------------------------------------------------------------
def _bins(tl: dict, metric: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each window bin's histogram of ``metric`` as (bucket mids in ms, counts)."""
    out = []
    for text in tl.get(f"{metric}_hdr", []):
        if not text:
            continue
        h = Hist.decode(text, digits=2)
        if h.count:
            counts, lows, widths = _buckets(h)
            out.append(((lows + widths / 2) / h.scale / 1000, counts))
    return out


def _pct(parts: list[tuple[np.ndarray, np.ndarray]], p: float) -> float | None:
    if not parts:
        return None
    v = np.concatenate([x for x, _ in parts])
    c = np.concatenate([n for _, n in parts])
    order = np.argsort(v)
    v, c = v[order], np.cumsum(c[order])
    k = int(np.searchsorted(c, p / 100 * c[-1]))
    return float(v[min(k, len(v) - 1)])


def _margins(s: dict, wl: str, slos: list[SloTerm], level: float, seed: int, sat: Saturation) -> list[dict]:
    """Per SLO, the stage's log(value / limit) with a block-bootstrap band at ``level``; [] without samples."""
    rate = float(s["rate"])
    if sat.saturated:
        return [{"rate": rate, "margin": math.inf, "low": math.inf, "high": math.inf, "slo": t.text,
                 "worst": "saturated", "ceiling": sat.ceiling_per_s} for t in slos]
    tl = (s.get("workloads", {}).get(wl) or s)["timeline"]
    per = {t: _bins(tl, t.metric) for t in slos}
    if any(not b for b in per.values()):
        return []
    out = []
    for k, t in enumerate(slos):
        bins = per[t]
        n = len(bins)
        point = math.log(max(_pct(bins, t.percentile), 1e-9) / t.limit_ms)
        # blocks of consecutive bins, as long as the bins' own autocorrelation asks: a stage near saturation
        # drifts through its window, and bins resampled one by one would make its band too narrow
        series = [_pct([x], t.percentile) for x in bins]
        length = max(stats.block_length(n, min(0.8, stats.pooled_autocorrelation([series]))), 1)
        rng = random.Random(f"loadgen.capacity:{seed}:{s['target']}:{s['rate']!r}:{k}")
        reps = []
        for _ in range(N_BOOT):
            starts = [rng.randrange(n) for _ in range(-(-n // length))]
            pick = [bins[(i + j) % n] for i in starts for j in range(length)][:n]
            reps.append(math.log(max(_pct(pick, t.percentile), 1e-9) / t.limit_ms))
        reps.sort()
        lo = reps[int((1 - level) / 2 * (N_BOOT - 1))]
        hi = reps[int((1 + level) / 2 * (N_BOOT - 1))]
        out.append({"rate": rate, "margin": point, "low": min(lo, point), "high": max(hi, point), "slo": t.text})
    return out


def _crossing(rows: list[dict], key: str) -> tuple[float | None, str]:
    """The lowest rate where ``key`` goes from ≤ 0 to > 0, on log rate; (None, why) when it does not."""
    if rows[0][key] > 0:
        return None, "below"
    for a, b in zip(rows, rows[1:]):
        if a[key] <= 0 < b[key]:
            if math.isinf(b[key]):
                return math.sqrt(a["rate"] * _top(a, b)), "between"
            f = -a[key] / (b[key] - a[key])
            # on log rate, as a power: a stage exactly at the limit (HDR values are bucketed) reads as itself,
            # where exp(log(24)) gave 24.000000000000004
            return a["rate"] * (b["rate"] / a["rate"]) ** f, "crossed"
    return None, "above"


def _top(a: dict, b: dict) -> float:
    """Where the capacity can lie up to, between a stage that met the SLOs (``a``) and a saturated one above it
    (``b``): its rate, or lower, what that server ended per second at most (the search's 30 req/s stage ended
    19.5 of them: the capacity in between is no higher than that)."""
    ceiling = b.get("ceiling")
    return b["rate"] if ceiling is None else min(b["rate"], max(a["rate"], ceiling))


def _one(rows: list[dict]) -> tuple[float | None, float | None, float | None, str]:
    """One SLO's capacity over a target's stages: (estimate, low, high, how) as :func:`_crossing` says it."""
    est, how = _crossing(rows, "margin")
    lo, _ = _crossing(rows, "high")
    hi, _ = _crossing(rows, "low")
    lowest, highest = rows[0]["rate"], rows[-1]["rate"]
    if how == "below":
        return None, None, lowest, how
    if how == "above":
        return None, lo if lo is not None else highest, None, how
    lo = lo if lo is not None else lowest
    hi = hi if hi is not None else highest
    if how == "between":
        a = max((r for r in rows if r["rate"] < est), key=lambda r: r["rate"])
        b = min((r for r in rows if r["rate"] > est), key=lambda r: r["rate"])
        lo, hi = min(lo, a["rate"]), _top(a, b)  # the stage above saturated: anywhere up to it (or its ceiling)
    return est, min(lo, est), max(hi, est), how


def capacity(target: str, stages: list[dict], wl: str, slos: list[SloTerm], confidence: float,
             seed: int = 0, sats: dict[int, Saturation] | None = None) -> Capacity | None:
    """The highest rate meeting every SLO: each SLO's own crossing (interpolated on its own margin, so a
    limit that binds late does not bend another's line), the lowest of them, and of their bands' ends
    (each SLO's band at the Šidák share of the level over the stages and the SLOs). ``sats``: the
    stages' saturation verdicts by id, when read already."""
    stages = sorted(stages, key=lambda s: s["rate"])
    if not stages:
        return None
    level = confidence ** (1.0 / (len(stages) * len(slos)))
    sats = sats or {}
    per_stage = [m for m in (_margins(s, wl, slos, level, seed, sats.get(id(s)) or saturation(s)) for s in stages)
                 if m]
    if not per_stage:
        return Capacity(target, None, None, None, [], f"{target}: no stage had samples of every SLO")
    rows = [max(m, key=lambda r: r["margin"]) | {"worst": max(m, key=lambda r: r["margin"])["slo"]}
            for m in per_stage]
    measured = [MarginAt(r["rate"], *(v if math.isfinite(v) else None for v in (r["margin"], r["low"], r["high"])),
                         r["worst"]) for r in rows]
    ones = [_one([m[k] for m in per_stage]) for k in range(len(slos))]
    lowest, highest = rows[0]["rate"], rows[-1]["rate"]
    if any(how == "below" for *_, how in ones):
        words = f"{target}: fails the SLOs already at the lowest rate measured, {lowest:g} req/s"
        return Capacity(target, None, None, lowest, measured, words)
    if all(how == "above" for *_, how in ones):
        lo = min(x[1] for x in ones)
        words = f"{target}: meets the SLOs at every rate measured, up to {highest:g} req/s (its capacity is higher)"
        return Capacity(target, None, lo, None, measured, words)
    found = [x for x in ones if x[3] != "above"]
    est = min(x[0] for x in found)
    lo = min(x[1] for x in ones if x[1] is not None)
    hi = min(x[2] for x in found)
    lo, hi = min(lo, est), max(hi, est)
    return Capacity(target, est, lo, hi, measured, f"{target}: {fmt_rate(est)} req/s ({fmt_rate(lo)}–{fmt_rate(hi)})")


def capacity_sentence(caps: dict[str, Capacity], slos: list[SloTerm], ref: str, cands: list[str]) -> str:
    """"with spec, capacity under TTFT p99 ≤ X and TPOT p50 ≤ Y is A req/s (interval) against B for base"."""
    terms = " and ".join(s.text for s in slos)

    def said(c: Capacity | None) -> str:
        if c is None:
            return "not measured"
        if c.estimate is not None:
            return f"{fmt_rate(c.estimate)} req/s ({fmt_rate(c.ci_low)}–{fmt_rate(c.ci_high)})"
        return (f"below {c.ci_high:g} req/s (the lowest rate measured)" if c.ci_high is not None
                else f"above {c.ci_low:g} req/s (the highest rate measured)")

    parts = [f"with {x}, capacity under {terms} is {said(caps.get(x))}" for x in cands]
    return "; ".join(parts) + f", against {said(caps.get(ref))} for {ref}."
