"""N configurations on one ladder: who is best where, the envelope, and the policy it implies.

In: per configuration (the reference first, then the candidates) one metric's ``StageSamples``
by concurrency, and which configurations adapt on their own. Out: a ``ConfigsResult``: every
pair's ``MetricAnalysis`` (each candidate against the reference, and every other pair, so the best
can be held against the runner-up wherever they are), per concurrency the best configuration or
the set that cannot be told apart, the envelope (best of all at each C) and each configuration's
shortfall from it, regions of the C axis with one best, the switch points between them with their
intervals, and the policy "use X for C ≤ a, Y above".

Joint intervals. With N configurations there are P = N(N-1)/2 pairs; each pair is analysed at
the Šidák level ``confidence ** (1/P)`` and, inside it, every stage at that level's own Šidák
share over the ladder's k stages (loadgen.analysis.locate). So every interval printed here (a
shortfall, the best's lead, a switch point) holds together with all the others, over pairs and
stages, with probability ``confidence`` (independent intervals; Šidák is conservative otherwise).
For two configurations P = 1 and this is exactly the two-target analysis.

An adaptive configuration (one that switches speculation by load on its own) is never chosen
for a region: the envelope and the policy are of the others, and it is measured against them
(how close it comes to the envelope at each C), since the point of measuring it is whether it
tracks that envelope.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from loadgen.analysis.bootstrap import boot_of
from loadgen.analysis.locate import _judge, analyze
from loadgen.analysis.results import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MARGIN,
    BASELINE,
    SPEC,
    Checked,
    MetricAnalysis,
    StageComparison,
    StageSamples,
    _known,
    level,
)

@dataclass
class PairResult:
    """Configuration ``b`` against ``a`` (``a`` first in the run's order: the analysis's "baseline" side)."""

    a: str
    b: str
    analysis: MetricAnalysis

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "analysis": self.analysis.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "PairResult":
        return cls(d["a"], d["b"], MetricAnalysis.from_dict(d["analysis"]))


@dataclass
class Gap:
    """One configuration against another at one C, relative to the other: (x − other) / other, with its
    joint interval; positive is higher (for a lower-is-better metric a negative gap is the good side).
    None where the pair could not be compared there."""

    delta: float | None
    ci_low: float | None
    ci_high: float | None
    against: str


@dataclass
class ConfigsAt:
    """Every configuration at one concurrency.

    ``means``: label → the metric's mean; ``leaders``: the best by mean first, then every
    configuration the joint intervals cannot tell from it; ``best``: the leader when it beats every
    other (non-adaptive) one, else None (a tie among ``leaders``); ``runner_up``: second by mean;
    ``lead``: the best by mean against the runner-up; ``envelope``: the best mean of the
    non-adaptive configurations; ``shortfall``: label → its gap to the configuration on the envelope
    (the envelope's own is 0).
    """

    concurrency: int
    means: dict[str, float]
    leaders: list[str]
    best: str | None
    runner_up: str | None
    lead: Gap | None
    envelope: float
    envelope_label: str
    shortfall: dict[str, Gap]
    vs_reference: dict[str, Gap] = field(default_factory=dict)
    """Every candidate measured here against the reference (its joint gap), when the reference was measured."""


@dataclass
class BestRegion:
    """Consecutive measured concurrencies with the same best (``best``; None: ``leaders`` tie there)."""

    best: str | None
    leaders: list[str]
    low_c: int
    high_c: int
    concurrencies: list[int]


@dataclass
class Switch:
    """Where the best changes from ``from_label`` to ``to_label``.

    From the pair's own analysis: ``estimate`` where their difference crosses zero, its joint
    interval ``ci_low``..``ci_high`` (``confirmed``); when the pair's difference is not significant on
    both sides (``confirmed`` False) the switch lies somewhere between the regions' measured edges,
    ``low_c`` and ``high_c``, and that range is the interval. A side that is a tie names its leaders.
    """

    from_label: str
    to_label: str
    estimate: float | None
    ci_low: float
    ci_high: float
    low_c: int
    high_c: int
    confirmed: bool


@dataclass
class PolicyStep:
    """Use ``labels`` (one best, or several that tie) from ``c_from`` (exclusive; None: from the first
    measured C) to ``c_to`` (inclusive; None: to the last measured C and beyond what was measured, not claimed)."""

    labels: list[str]
    c_from: float | None
    c_to: float | None
    measured: tuple[int, int]
    """The lowest and highest measured C of this step's region."""
    switch: Switch | None = None
    """The switch at ``c_to``, when the boundary is one the two configurations' own comparison located."""
    batch_from: dict | None = None
    batch_to: dict | None = None
    """``c_from`` and ``c_to`` as the running batch this step's (first) configuration's server reported there
    (analysis.serverview.BatchAt as a dict: ``running`` None with ``why`` where not measured); set by
    :func:`add_batches`."""


@dataclass
class ConfigsResult:
    """One metric of one workload over N configurations (see the module doc)."""

    metric: str
    higher_is_better: bool
    confidence: float
    pair_confidence: float
    labels: list[str]
    reference: str
    adaptive: list[str]
    pairs: list[PairResult]
    at: list[ConfigsAt]
    regions: list[BestRegion]
    switches: list[Switch]
    policy: list[PolicyStep]
    excluded: dict[str, str] = field(default_factory=dict)
    """label → why it is not compared (no stage with enough windows for this metric)."""
    unmeasured: dict[str, str] = field(default_factory=dict)
    """label → the stages it has no figures for and why (every request failed there), the rest compared."""
    simulator_truth: list[Checked] = field(default_factory=list)
    """On the embedded simulators (analysis/truth.py): each switch of the policy against the simulator's own; on
    the rate axis each adaptive configuration's gap to the envelope at each rate."""
    gap_truth: list[Checked] = field(default_factory=list)
    """On the embedded simulators: each adaptive configuration's gap to the envelope at each C beside the
    simulator's own."""

    def pair(self, a: str, b: str) -> tuple[PairResult, bool] | None:
        """The pair of ``a`` and ``b`` and whether it is stored the other way round (b, a)."""
        for p in self.pairs:
            if (p.a, p.b) == (a, b):
                return p, False
            if (p.a, p.b) == (b, a):
                return p, True
        return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pairs"] = [p.to_dict() for p in self.pairs]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ConfigsResult":
        d = _known(cls, d)
        d["pairs"] = [PairResult.from_dict(p) for p in d.get("pairs", [])]

        def gap(g):
            return None if g is None else Gap(**_known(Gap, g))

        d["at"] = [ConfigsAt(**{**_known(ConfigsAt, a), "lead": gap(a.get("lead")),
                                "shortfall": {k: gap(v) for k, v in (a.get("shortfall") or {}).items()},
                                "vs_reference": {k: gap(v) for k, v in (a.get("vs_reference") or {}).items()}})
                   for a in d.get("at", [])]
        d["regions"] = [BestRegion(**_known(BestRegion, r)) for r in d.get("regions", [])]
        d["switches"] = [Switch(**_known(Switch, s)) for s in d.get("switches", [])]
        d["policy"] = [PolicyStep(**{**_known(PolicyStep, p), "measured": tuple(p["measured"]),
                                     "switch": Switch(**_known(Switch, p["switch"])) if p.get("switch") else None})
                       for p in d.get("policy", [])]
        for key in ("simulator_truth", "gap_truth"):
            d[key] = [Checked.from_dict(k) for k in d.get(key) or []]
        return cls(**d)


# ------------------------------------------------------------------------------------------ analysis


def _inv(v: float) -> float:
    """(a − b)/b from v = (b − a)/a; unbounded where b is 0 (v = −1: a stage's resampled figure can be
    nothing when its window held one request, as a slow CPU host's 6 s windows did)."""
    return 1.0 / (1.0 + v) - 1.0 if v > -1.0 else math.inf


def _invert(lo: float, hi: float) -> tuple[float, float]:
    """The interval of (a − b)/b from that of (b − a)/a."""
    return _inv(hi), _inv(lo)


def _gap(res: "ConfigsResult", x: str, other: str, c: int) -> Gap:
    """``x`` against ``other`` at ``c``, at the joint level."""
    found = res.pair(x, other)
    if found is None:
        return Gap(None, None, None, other)
    p, flipped = found
    comp = next((k for k in p.analysis.comparisons if k.concurrency == c), None)
    boot = boot_of(comp) if comp is not None else None
    if comp is None or boot is None or comp.delta is None:
        return Gap(None, None, None, other)
    lo, hi = boot.interval(_stage_level(p.analysis))
    d = comp.delta
    # the pair stores (b − a)/a: x is b unless flipped
    if not flipped:  # x == p.a: invert
        d = _inv(d)
        lo, hi = _invert(lo, hi)
    return Gap(d, lo, hi, other)


def envelope_word(g: Gap | None, higher_is_better: bool, margin: float = DEFAULT_MARGIN) -> str:
    """An adaptive configuration's gap to the envelope in words, by its joint interval; a gap smaller than
    ``margin`` is no side, as a stage's verdict is a tie below it (analysis.crossover §3): 0.1 % ahead of spec
    on a tight paired interval is not "better than the envelope"."""
    if g is None or g.ci_low is None or g.ci_high is None or g.delta is None:
        return "not compared"
    if g.ci_low <= 0 <= g.ci_high:
        return "on the envelope (not told apart)"
    if abs(g.delta) < margin:
        return f"on the envelope (within {margin * 100:g} %)"
    if (g.ci_low > 0) if higher_is_better else (g.ci_high < 0):
        return "better than the envelope"
    if (g.ci_high < 0) if higher_is_better else (g.ci_low > 0):
        return "short of the envelope"
    return "on the envelope (not told apart)"


def _stage_level(a: MetricAnalysis) -> float:
    """The per-stage level of the pair's whole-ladder verdicts (locate._judge's, which set them)."""
    return _judge(a.comparisons, a.confidence, True, a.ladder or None)[1]


def _beats(res: "ConfigsResult", x: str, other: str, c: int) -> bool:
    """``x`` is better than ``other`` at ``c`` by the pair's whole-ladder (family) verdict."""
    found = res.pair(x, other)
    if found is None:
        return False
    p, flipped = found
    comp: StageComparison | None = next((k for k in p.analysis.comparisons if k.concurrency == c), None)
    if comp is None:
        return False
    side = SPEC if flipped else BASELINE  # x is the pair's b ("spec") when flipped
    return comp.family_verdict == side


def analyze_configs(metric: str, stages: Mapping[str, Sequence[StageSamples]], *, labels: Sequence[str],
                    adaptive: Sequence[str] = (), confidence: float = DEFAULT_CONFIDENCE,
                    margin: float = DEFAULT_MARGIN, seed: int = 0,
                    ladder: Sequence[float] | None = None, paired: bool = False,
                    to_stages: bool = False) -> ConfigsResult:
    """The N-configuration analysis of one metric (module doc). ``labels``: the run's order, the reference
    first; ``stages``: label → its stages (a label with none is excluded, with the reason). ``paired`` and
    ``to_stages`` go to every pair's analysis (an open loop's stages are aligned bin by bin on one schedule)."""
    excluded = {x: "no stage with enough windows for this metric" for x in labels if not stages.get(x)}
    live = [x for x in labels if x not in excluded]
    hib = next((s.higher_is_better for x in live for s in stages[x]), True)
    n_pairs = len(live) * (len(live) - 1) // 2
    pair_level = confidence ** (1.0 / max(1, n_pairs))
    res = ConfigsResult(metric, hib, confidence, pair_level, list(labels), labels[0],
                        [x for x in adaptive if x in labels], [], [], [], [], [], excluded)
    for i, a in enumerate(live):
        for b in live[i + 1:]:
            common = {s.concurrency for s in stages[a]} & {s.concurrency for s in stages[b]}
            if not common:
                continue
            res.pairs.append(PairResult(a, b, analyze(metric, stages[a], stages[b], confidence=pair_level,
                                                      margin=margin, seed=seed, ladder=ladder, paired=paired,
                                                      to_stages=to_stages)))
    means = {x: {s.concurrency: _mean(s) for s in stages[x]} for x in live}
    chooseable = [x for x in live if x not in res.adaptive]
    sign = 1.0 if hib else -1.0
    for c in sorted({c for x in live for c in means[x]}):
        here = {x: means[x][c] for x in live if c in means[x]}
        pick = sorted((x for x in chooseable if x in here), key=lambda x: -sign * here[x])
        if not pick:
            continue
        top = pick[0]
        others = pick[1:]
        leaders = [top] + [x for x in others if not _beats(res, top, x, c)]
        best = top if len(leaders) == 1 else None
        runner = others[0] if others else None
        lead = _gap(res, top, runner, c) if runner else None
        shortfall = {x: (Gap(0.0, 0.0, 0.0, top) if x == top else _gap(res, x, top, c)) for x in here}
        vs_ref = {x: _gap(res, x, res.reference, c) for x in here if x != res.reference and res.reference in here}
        res.at.append(ConfigsAt(c, here, leaders, best, runner, lead, here[top], top, shortfall, vs_ref))
    res.regions = _regions(res.at, ladder)
    res.switches = _switches(res)
    res.policy = _policy(res)
    return res


def _mean(s: StageSamples) -> float:
    """A stage's mean as its pairs' deltas take it: weighted by the requests behind each sample when it has them
    (an open loop's per-request figures), so a table's means and its gaps are of one figure."""
    if s.weights:
        return math.fsum(w * x for w, x in zip(s.weights, s.samples)) / math.fsum(s.weights)
    return math.fsum(s.samples) / len(s.samples)


def _regions(at: Sequence[ConfigsAt], ladder: Sequence[int] | None) -> list[BestRegion]:
    """Consecutive planned concurrencies with the same best, or the same tie. Stages outside the ladder
    (refinement) help place a switch but never start a region, as they never declare a crossover."""
    out: list[BestRegion] = []
    for a in at:
        if ladder and a.concurrency not in ladder:
            continue
        # a best's leaders are [best]: the key is the best, or the set that ties
        if out and (out[-1].best, sorted(out[-1].leaders)) == (a.best, sorted(a.leaders)):
            out[-1].high_c = a.concurrency
            out[-1].concurrencies.append(a.concurrency)
        else:
            out.append(BestRegion(a.best, list(a.leaders), a.concurrency, a.concurrency, [a.concurrency]))
    return out


def _switches(res: ConfigsResult) -> list[Switch]:
    """Between consecutive regions with a single best each (ties between them are crossed): the pair's own
    crossover between those regions' edges, else the edges themselves as the interval."""
    singles = [r for r in res.regions if r.best is not None]
    out: list[Switch] = []
    for r, s in zip(singles, singles[1:]):
        if r.best == s.best:
            continue
        lo, hi = r.high_c, s.low_c
        found = res.pair(r.best, s.best)
        xs = [] if found is None else found[0].analysis.crossovers
        near = [x for x in xs if x.low_c >= lo - 1e-9 and x.high_c <= hi + 1e-9] or \
               [x for x in xs if lo <= x.estimate <= hi]
        if near:
            x = min(near, key=lambda x: abs(math.log(x.estimate) - 0.5 * (math.log(lo) + math.log(hi))))
            out.append(Switch(r.best, s.best, x.estimate, x.ci_low, x.ci_high, x.low_c, x.high_c, True))
        else:
            out.append(Switch(r.best, s.best, None, float(lo), float(hi), lo, hi, False))
    return out


def _policy(res: ConfigsResult) -> list[PolicyStep]:
    """The regions as steps of a policy. A tie between a region where X is best and the next where Y is,
    among X and Y only, is where the switch lies: it becomes the switch's interval, not a step. Each
    boundary is its switch's estimate where the pair located it, else the middle (on log C) of the gap
    between the regions' measured edges."""
    regs = res.regions
    kept = []
    for i, r in enumerate(regs):
        if r.best is None and 0 < i < len(regs) - 1:
            prev, nxt = regs[i - 1], regs[i + 1]
            if prev.best and nxt.best and prev.best != nxt.best and set(r.leaders) <= {prev.best, nxt.best}:
                continue
        kept.append(r)
    steps: list[PolicyStep] = []
    for r in kept:
        if steps and steps[-1].labels == r.leaders:
            steps[-1].measured = (steps[-1].measured[0], r.high_c)
            continue
        if steps:
            prev = steps[-1]
            sw = None
            if len(prev.labels) == 1 and len(r.leaders) == 1:
                sw = next((w for w in res.switches if w.from_label == prev.labels[0] and w.to_label == r.leaders[0]
                           and prev.measured[1] <= w.high_c and w.low_c <= r.low_c), None)
            at = sw.estimate if sw is not None and sw.estimate is not None else math.sqrt(prev.measured[1] * r.low_c)
            prev.c_to, prev.switch = at, sw
            steps.append(PolicyStep(list(r.leaders), at, None, (r.low_c, r.high_c)))
        else:
            steps.append(PolicyStep(list(r.leaders), None, None, (r.low_c, r.high_c)))
    return steps


def fmt_c(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 or x >= 100 else f"{x:.1f}"


def policy_sentence(res: ConfigsResult, label: str | None = None) -> str:
    """"use X for C ≤ a (90 % joint interval lo–hi), Y above a (measured C=1–250)"."""
    name = label or res.metric
    if not res.policy:
        return f"{name}: no configuration was compared."
    parts = []
    for i, p in enumerate(res.policy):
        who = p.labels[0] if len(p.labels) == 1 else " or ".join(p.labels) + " (not told apart)"
        if len(res.policy) == 1:
            parts.append(f"{who} at every measured C")
            continue
        why = ""
        if p.c_to is not None:
            sw = p.switch
            if sw is not None and sw.confirmed:
                why = f" ({level(res.confidence)} % joint interval {fmt_c(sw.ci_low)}–{fmt_c(sw.ci_high)})"
            else:
                why = f" (somewhere between the measured C={p.measured[1]} and {res.policy[i + 1].measured[0]})"
        if i == 0:
            parts.append(f"{who} for C ≤ {fmt_c(p.c_to)}{why}")
        elif p.c_to is None:
            parts.append(f"{who} above {fmt_c(p.c_from)}")
        else:
            parts.append(f"{who} for {fmt_c(p.c_from)} < C ≤ {fmt_c(p.c_to)}{why}")
    lo, hi = res.policy[0].measured[0], res.policy[-1].measured[1]
    return f"{name}: use " + ", ".join(parts) + f" (measured C={lo}–{hi})."


def excluded_words(res: ConfigsResult) -> str:
    """" X is not compared: why." for every configuration left out (and where one is partly), or ""."""
    return ("".join(f" {x} is not compared: {why}." for x, why in res.excluded.items())
            + "".join(f" {x} is compared only where it was measured: {why}." for x, why in res.unmeasured.items()))


def add_batches(res: ConfigsResult, rows: Mapping[str, Sequence]) -> None:
    """Each policy step's bounds in its own server's running batch (``rows``: label → its StageServer rows
    of this workload, analysis.serverview), so the policy can be written as engines take it: by batch size."""
    from dataclasses import asdict as _asdict

    from loadgen.analysis.serverview import batch_at

    for p in res.policy:
        own = list(rows.get(p.labels[0], []))
        p.batch_from = _asdict(batch_at(own, p.c_from)) if p.c_from is not None else None
        p.batch_to = _asdict(batch_at(own, p.c_to)) if p.c_to is not None else None


def batch_sentence(res: ConfigsResult) -> str:
    """The policy's boundaries as the running batch each step's server reported: "" with one step or none
    measured; a bound outside the measured stages, or with no running gauge, is said to be not measured."""
    if len(res.policy) < 2:
        return ""
    parts, measured = [], False
    for p in res.policy:
        who = p.labels[0] if len(p.labels) == 1 else " or ".join(p.labels)

        def run(b: dict | None) -> str | None:
            return None if not b or b.get("running") is None else f"{b['running']:.1f}"

        lo, hi = run(p.batch_from), run(p.batch_to)
        measured = measured or lo is not None or hi is not None
        if p.c_from is None:
            parts.append(f"{who} up to a running batch of {hi}" if hi else f"{who} below C={fmt_c(p.c_to)} "
                         f"(batch {(p.batch_to or {}).get('why') or 'not measured'})")
        elif p.c_to is None:
            parts.append(f"{who} from {lo}" if lo else f"{who} above C={fmt_c(p.c_from)} (batch not measured)")
        else:
            parts.append(f"{who} from {lo or '?'} to {hi or '?'}")
    return ("in the running batch each server reported: " + "; ".join(parts) + ".") if measured else ""
