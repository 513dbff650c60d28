"""From a results file to crossover analyses: per workload, per metric, baseline vs speculative.

In: a results document (``run.json``, live or reloaded). Out: a ``RunAnalysis`` (``run_analysis``),
whose ``to_dict`` is crossover.json: per workload and metric a ``MetricResult``
(the ``MetricAnalysis``, its verdict and sentence), per workload its ``WorkloadCoverage``.

Each stage's steady window is cut into bins (loadgen/stage/timeline.py); a metric's
value in each bin is one sample, and loadgen.analysis.crossover bootstraps over those
samples. Stages repeated for the same target, workload and concurrency pool
their bins. The metrics compared, their labels, units and order are declared by the
metric modules (loadgen.metrics.CROSSOVER).

A phase-shifting workload (``phases:``, loadgen/workloads/phases.py) labels each request with its phase's
workload, so its stage has one slice per phase; each rests only on its phase's own time: the bins wholly
inside that phase's intervals (the schedule runs from the window's start, where the stage anchored it), less
a transition margin at each phase's start (:func:`slice_timeline`, the one place slices get their bins; the
report's slices read it too). With N configurations each phase then has its own comparison, an adaptive
configuration's gap to the envelope per phase and C (on the embedded simulators ``loadgen crossover`` puts
the simulator's own gap beside it, with the switches' own).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from loadgen.analysis.coverage import (
    CUT_BY,
    Coverage,
    WorkloadCoverage,
    coverage,
    cut_words,
    fmt_cs,
    planned_stages,
    run_cut_words,
    why_unusable,
    window_whole,
)
from loadgen.analysis.configs import ConfigsResult, add_batches, analyze_configs, batch_sentence, excluded_words, policy_sentence
from loadgen.analysis.crossover import MetricAnalysis, StageSamples, analyze, verdict
from loadgen.analysis.engineterms import Translation, translate
from loadgen.analysis.repeats import PassSpread, pass_spread
from loadgen.analysis.results import DEFAULT_TIE_MARGIN, Checked, Crossover
from loadgen.analysis.sequential import look_level
from loadgen.analysis.serverview import server_view
from loadgen.errors import LoadgenError
from loadgen.metrics import CROSSOVER, CrossoverSample
from loadgen.stage.timeline import Timeline
from loadgen.workloads.phases import PhaseSchedule, schedules


@dataclass(frozen=True)
class CrossoverMetric:
    """A crossover metric as loadgen.metrics declares it, and its per-window samples off a stage's timeline."""

    spec: CrossoverSample

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def unit(self) -> str:
        return self.spec.unit

    @property
    def higher_is_better(self) -> bool:
        return self.spec.higher_is_better

    def samples(self, tl: dict) -> list[float]:
        s = self.spec
        if s.kind == "rate":
            return Timeline.rate(tl, s.series[0])
        if s.kind == "ratio":
            return Timeline.ratio(tl, s.series[0], s.series[1])
        if s.kind == "percentile":
            return Timeline.percentile(tl, s.series[0], s.percentile, min_count=s.min_count)
        raise ValueError(f"{s.name}: unknown kind of crossover sample {s.kind!r}")


__all__ = ["CrossoverMetric", "METRICS", "BY_NAME", "roles", "configurations", "workloads_of", "MetricResult", "RunAnalysis",
           "run_analysis",
           # from loadgen.analysis.coverage, imported from here by loadgen/report and loadgen/cli
           "CUT_BY", "Coverage", "WorkloadCoverage", "coverage", "cut_words", "fmt_cs", "planned_stages",
           "run_cut_words", "window_whole"]

METRICS = tuple(CrossoverMetric(s) for s in CROSSOVER)
DECIDES = "output_tokens_per_s"
"""The metric whose verdict says where to enable speculation, without SLOs; the others say where each target
is better."""
DECIDES_WITH_SLOS = "goodput_requests_per_s"
"""With SLOs given (--slo), the requests per second that met them decide."""


def deciding_metric(doc: dict) -> str:
    """Which metric says where to enable speculation in this run: goodput when it was run with SLOs."""
    slo = ((doc.get("run") or {}).get("settings") or {}).get("slo") or {}
    return DECIDES_WITH_SLOS if any(v is not None for v in slo.values()) else DECIDES
BY_NAME = {m.name: m for m in METRICS}


def roles(doc: dict) -> tuple[str, str]:
    """(baseline label, speculative label) of a two-target run."""
    run = doc.get("run", {})
    r = run.get("roles")
    if r:
        return r["baseline"], r["spec"]
    labels = []
    for s in doc.get("stages", []):
        if s["target"] not in labels:
            labels.append(s["target"])
    if "baseline" in labels and "spec" in labels:
        return "baseline", "spec"
    if len(labels) != 2:
        raise LoadgenError(f"crossover needs exactly two targets in the results, found {labels or 'none'}")
    return labels[0], labels[1]


def configurations(doc: dict) -> tuple[list[str], list[str]]:
    """(labels, adaptive labels) of a run: the reference first, then the candidates, in the run's order
    (``run.configurations``, written by loadgen crossover and the Locust ramp)."""
    run = doc.get("run", {})
    conf = run.get("configurations") or {}
    if conf.get("reference"):
        labels = [conf["reference"], *conf.get("candidates", [])]
        return labels, [x for x in conf.get("adaptive", []) if x in labels]
    labels = [t["label"] if isinstance(t, dict) else t for t in run.get("targets") or []]
    for s in doc.get("stages", []):
        if s["target"] not in labels:
            labels.append(s["target"])
    # a file without ``configurations`` predates adaptive modes and targets: none of its targets is one
    return (list(roles(doc)) if len(labels) <= 2 else labels), []


def all_failed(s: dict) -> str:
    """Why every request of stage ``s`` failed ("connect: cannot connect to …"), or "" when some completed.
    Such a stage measured no throughput: its 0 tok/s is a fault, compared it would only read as a tie
    (a ratio to zero has no interval), so it is left out and named."""
    req = s.get("requests") or {}
    if req.get("completed") or not req.get("failed"):
        return ""
    kinds = req.get("failures") or {}
    first = max(kinds.items(), key=lambda kv: kv[1].get("count", 0), default=None)
    return f"{first[0]}: {first[1].get('first_message', '')}".strip() if first else "failed"


def failed_stages(doc: dict) -> dict[str, dict[int, str]]:
    """label → {C: why} of the stages where every request failed."""
    out: dict[str, dict[int, str]] = {}
    for s in doc.get("stages", []):
        why = all_failed(s)
        if why:
            out.setdefault(s["target"], {})[s["concurrency"]] = why
    return out


def run_schedules(doc: dict) -> list[PhaseSchedule]:
    """The phase schedules of a run's workloads (``run.workloads``; none in a run without ``phases:``)."""
    return schedules((doc.get("run") or {}).get("workloads") or [])


def stage_schedule(s: dict, scheds: list[PhaseSchedule]) -> PhaseSchedule | None:
    """The schedule stage ``s`` ran: the run's phased workload whose phase names its slices are (a run holds at
    most one: a config's workload is one spec), or None for a stage of any other workload."""
    wls = set(s.get("workloads") or {})
    return next((x for x in scheds if wls and wls <= set(x.names)), None)


TRANSITION = "p99"
"""Each phase but the window's first is read only once this percentile of the E2E of the phase before it (its
workload's, in this stage) has passed since it began: by then the previous phase's requests, sent up to its last
instant, have ended (closed loop: every user's next request is the new phase's). The previous phase's, not the
stage's: on the simulators (pcie-8gpu-eagle3, phases:predictable@8s,freetext@8s, C=8) predictable's requests were
gone 3.2 s after freetext began (its E2E p99 3.7 s) while freetext's, p99 17 s, still made 31 % of the tokens
5-6 s into the next predictable phase: one stage-wide margin (10.6 s) would have cut every freetext bin. With
64-token replies (C=8 and 48) the kept bins held 0 tokens of the other phase in every stage. The window's first
phase needs none: the warm-up ran it."""


def transition_s(s: dict, previous: str) -> float:
    """The margin (s) at the start of a phase that follows ``previous`` in stage ``s`` (:data:`TRANSITION`; the
    stage's E2E where that workload has none)."""
    e2e = ((s.get("workloads") or {}).get(previous) or {}).get("e2e") or {}
    if not e2e.get(TRANSITION):
        e2e = s.get("e2e") or {}
    return float(e2e.get(TRANSITION) or e2e.get("max") or 0.0) / 1000.0


def phase_bins(s: dict, wl: str, sched: PhaseSchedule) -> list[int]:
    """The window bins of stage ``s`` that lie wholly inside a phase named ``wl``, past the transition margin
    (:func:`transition_s`; none for the window's first phase, or after a phase of the same workload). Bin i spans
    [i·bin_s, (i+1)·bin_s) after the window's start, the instant the schedule was anchored."""
    tl = s.get("timeline") or {}
    b = float(tl.get("bin_s") or 0.0)
    n = len(tl.get("tokens") or [])
    if b <= 0 or not n:
        return []
    phases = sched.phases
    keep = []
    for start, end, i in sched.intervals(n * b):
        if phases[i].name != wl:
            continue
        previous = phases[i - 1].name
        lo = start + (transition_s(s, previous) if start > 0 and previous != wl else 0.0)
        first = math.ceil(lo / b - 1e-9)
        last = math.floor(end / b + 1e-9)  # bins [first, last) end by the phase's end
        keep.extend(range(max(0, first), min(n, last)))
    return keep


def only_bins(tl: dict, keep: list[int]) -> dict:
    """A timeline dict with only the bins ``keep`` (every per-bin list cut alike, ``bin_s`` kept)."""
    return {k: ([v[i] for i in keep if i < len(v)] if isinstance(v, list) else v) for k, v in tl.items()}


def slice_timeline(s: dict, wl: str, scheds: list[PhaseSchedule]) -> dict:
    """The timeline one slice of stage ``s`` rests on: the workload's own (``all``: the stage's), a phase's only
    over its own bins (:func:`phase_bins`; ``all`` keeps the whole window of the alternating load)."""
    if wl == "all":
        return s.get("timeline") or {}
    tl = ((s.get("workloads") or {}).get(wl) or {}).get("timeline") or {}
    sched = stage_schedule(s, scheds)
    return tl if sched is None else only_bins(tl, phase_bins(s, wl, sched))


def _slices(doc: dict) -> dict[tuple[str, str, int], list[tuple[int, dict]]]:
    """(target, workload, C) → (pass, timeline) of every stage slice measured there (not those that did not
    measure their load: :func:`coverage.why_unusable`); the pass is the stage's ``repeat`` (0 in a run without repeats). A
    phase's slice holds only its phase's bins (:func:`slice_timeline`)."""
    out: dict[tuple[str, str, int], list[tuple[int, dict]]] = {}
    scheds = run_schedules(doc)
    for s in doc.get("stages", []):
        if why_unusable(s):
            continue
        r = int(s.get("repeat") or 0)
        for wl in s.get("workloads", {}):
            out.setdefault((s["target"], wl, s["concurrency"]), []).append((r, slice_timeline(s, wl, scheds)))
        if len(s.get("workloads", {})) > 1:
            out.setdefault((s["target"], "all", s["concurrency"]), []).append((r, s["timeline"]))
    return out


def workloads_of(doc: dict) -> list[str]:
    return sorted({wl for (_, wl, _) in _slices(doc)})


@dataclass
class MetricResult:
    """One metric of one workload in crossover.json: its analysis and its verdict in words."""

    label: str
    unit: str
    analysis: MetricAnalysis
    recommendation: str
    verdict: str
    caveat: str
    everywhere: bool
    finding: str = ""
    """The verdict's finding alone, without what it rests on or the detail (the terminal's line for a metric
    that leans against the deciding one)."""
    simulator_truth: list[Checked] = field(default_factory=list)
    """On the embedded simulators: beside each reported crossover, the simulator's own (analysis/truth.py)."""
    passes: PassSpread | None = None
    """A run with --repeat: each stage's figure per pass, its CV, each pass's own difference (analysis/repeats.py)."""

    def to_dict(self) -> dict[str, Any]:
        d = {"label": self.label, "unit": self.unit, "analysis": self.analysis.to_dict(),
             "recommendation": self.recommendation, "verdict": self.verdict, "caveat": self.caveat,
             "everywhere": self.everywhere, "finding": self.finding}
        if self.simulator_truth:
            d["simulator_truth"] = [k.to_dict() for k in self.simulator_truth]
        if self.passes is not None:
            d["passes"] = self.passes.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "MetricResult":
        return cls(d["label"], d["unit"], MetricAnalysis.from_dict(d["analysis"]), d.get("recommendation", ""),
                   d.get("verdict", ""), d.get("caveat", ""), d.get("everywhere", False), d.get("finding", ""),
                   [Checked.from_dict(k) for k in d.get("simulator_truth") or []],
                   PassSpread.from_dict(d["passes"]) if d.get("passes") else None)


@dataclass
class RunAnalysis:
    """A run's analysis (crossover.json): per workload, per metric a ``MetricResult``; per workload its coverage.

    Every workload of the plan or the stages is in ``workloads``; one never compared (no concurrency with
    complete stages of both targets) has no metric there and its coverage says "not compared", with its sentence.
    """

    baseline: str
    spec: str
    confidence: float
    workloads: dict[str, dict[str, MetricResult]]
    coverage: dict[str, WorkloadCoverage]
    targets: list[str] = field(default_factory=list)
    """Every configuration, the reference (``baseline``) first; ``spec`` is the first candidate."""
    adaptive: list[str] = field(default_factory=list)
    configs: dict[str, dict[str, ConfigsResult]] = field(default_factory=dict)
    """Three or more configurations: per workload and metric, all of them at once (analysis/configs.py);
    ``workloads`` then holds the reference against the first candidate, as a two-target run would."""
    policy: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per workload and metric, the policy in words (three or more configurations)."""
    engine_terms: dict[str, Translation] = field(default_factory=dict)
    """Per workload, the output-throughput policy as the engines' own settings, or why it has none."""
    decides: str = DECIDES
    """The metric whose verdict says where to enable speculation (:func:`deciding_metric`)."""
    looks: int = 1
    """Passes the run planned with a look after each (``--passes``): every interval is then at
    1 − α/looks (analysis/sequential.py), and ``confidence`` is that level."""
    tie_margin: float = DEFAULT_TIE_MARGIN
    """``--tie``: a load point whose whole interval lies within ± this is a tie."""

    def crossovers(self, metric: str) -> dict[str, list[Crossover]]:
        """Workload → ``metric``'s confirmed and unconfirmed crossovers, reference against the first candidate."""
        return {wl: per[metric].analysis.crossovers for wl, per in self.workloads.items() if metric in per}

    def to_dict(self) -> dict[str, Any]:
        d = {"baseline": self.baseline, "spec": self.spec, "confidence": self.confidence,
             "workloads": {wl: {name: m.to_dict() for name, m in per.items()} for wl, per in self.workloads.items()},
             "coverage": {wl: c.to_dict() for wl, c in self.coverage.items()},
             "targets": list(self.targets), "adaptive": list(self.adaptive), "decides": self.decides,
             "looks": self.looks, "tie_margin": self.tie_margin}
        if self.configs:
            d["configs"] = {wl: {name: r.to_dict() for name, r in per.items()} for wl, per in self.configs.items()}
            d["policy"] = {wl: dict(per) for wl, per in self.policy.items()}
            d["engine_terms"] = {wl: t.to_dict() for wl, t in self.engine_terms.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunAnalysis":
        return cls(d["baseline"], d["spec"], d["confidence"],
                   {wl: {name: MetricResult.from_dict(m) for name, m in per.items()}
                    for wl, per in d.get("workloads", {}).items()},
                   {wl: WorkloadCoverage.from_dict(c) for wl, c in (d.get("coverage") or {}).items()},
                   list(d.get("targets") or [d["baseline"], d["spec"]]), list(d.get("adaptive") or []),
                   {wl: {name: ConfigsResult.from_dict(r) for name, r in per.items()}
                    for wl, per in (d.get("configs") or {}).items()},
                   {wl: dict(per) for wl, per in (d.get("policy") or {}).items()},
                   {wl: Translation.from_dict(t) for wl, t in (d.get("engine_terms") or {}).items()},
                   d.get("decides", DECIDES), int(d.get("looks") or 1),
                   float(d.get("tie_margin") or DEFAULT_TIE_MARGIN))


def run_analysis(doc: dict, metrics=METRICS, *, confidence: float = 0.90, margin: float = 0.01,
                 seed: int = 0) -> RunAnalysis:
    """The analysis of a results document (see :class:`RunAnalysis`); a run that planned ``looks`` passes
    (``--passes``) is judged at 1 − (1 − ``confidence``)/looks, its ties within its ``--tie``."""
    looks = int(doc.get("run", {}).get("looks") or 1)
    tie_margin = float(doc.get("run", {}).get("tie") or DEFAULT_TIE_MARGIN)
    confidence = look_level(confidence, looks)
    labels, adaptive = configurations(doc)
    base, spec = labels[0], labels[1]
    slices = _slices(doc)
    failed = failed_stages(doc)
    covs, not_compared = coverage(doc, base, spec)
    # Stages added by refinement help place a crossover but never declare one (crossover.analyze).
    ladder = doc.get("run", {}).get("ladder")
    out = RunAnalysis(base, spec, confidence, {}, {}, labels, adaptive, decides=deciding_metric(doc), looks=looks,
                      tie_margin=tie_margin)
    rows = server_view(doc, base, spec).rows if len(labels) > 2 else {}
    for wl, cov in covs.items():
        per_metric: dict[str, MetricResult] = {}
        scope = cov.scope()
        wl_ladder = ladder if ladder else (scope.planned or None)
        for m in metrics:
            by_label: dict[str, list[StageSamples]] = {x: [] for x in labels}
            for (target, w, c), tls in sorted(slices.items(), key=lambda kv: kv[0][2]):
                if w != wl or target not in by_label:
                    continue
                values = [v for _, tl in tls for v in m.samples(tl)]
                if len(values) < 2:
                    continue
                by_label[target].append(StageSamples(c, values, m.higher_is_better))
            if len(labels) > 2 and sum(1 for x in labels if by_label[x]) >= 2:
                r = analyze_configs(m.name, by_label, labels=labels, adaptive=adaptive, confidence=confidence,
                                    margin=margin, seed=seed, ladder=wl_ladder)
                for x, per_c in failed.items():
                    cs = ", ".join(map(str, sorted(per_c)))
                    why = f"every request failed at C={cs} ({next(iter(per_c.values()))})"
                    if x in r.excluded:
                        r.excluded[x] = why
                    elif x in r.labels:
                        r.unmeasured[x] = why
                add_batches(r, rows.get(wl, {}))
                if m.name == "output_tokens_per_s":
                    out.engine_terms[wl] = translate([asdict(p) for p in r.policy],
                                                     doc.get("run", {}).get("servers") or {}, r.reference)
                out.configs.setdefault(wl, {})[m.name] = r
                batch = batch_sentence(r) if m.name == "output_tokens_per_s" else ""
                out.policy.setdefault(wl, {})[m.name] = (policy_sentence(r, m.label) + excluded_words(r)
                                                         + (" " + batch.capitalize() if batch else ""))
            b, s = by_label.get(base, []), by_label.get(spec, [])
            common = {x.concurrency for x in b} & {x.concurrency for x in s}
            if not common:
                continue
            a: MetricAnalysis = analyze(m.name, b, s, confidence=confidence, margin=margin, seed=seed,
                                        ladder=wl_ladder, tie_margin=tie_margin)
            passes = pass_spread(_per_pass(slices, wl, m, labels), base, spec, m.higher_is_better,
                                 confidence=confidence, seed=seed)
            m_scope = _with_pass_flags(scope, passes, common)
            if passes is not None and m.name == out.decides:  # the terminal's and the page's flags list
                for c, labels_c in m_scope.flagged.items():
                    cov.flagged[c] = list(labels_c)
            v = verdict(a, m_scope, advises=m.name == out.decides, worse_with_spec=m.spec.worse_with_spec)
            per_metric[m.name] = MetricResult(m.label, m.unit, a, v.sentence.replace(m.name + ":", m.label + ":", 1),
                                              v.kind, v.caveat, v.everywhere,
                                              v.text.replace(m.name + ":", m.label + ":", 1), passes=passes)
        out.workloads[wl] = per_metric
        out.coverage[wl] = cov.result(not_compared.get(wl, ""))
    return out


def _per_pass(slices, wl: str, m: CrossoverMetric, labels: list[str]) -> dict[str, dict[int, dict[int, list[float]]]]:
    """target → C → pass → that pass's window samples of ``m`` (passes of one stage pooled: a resumed stage)."""
    out: dict[str, dict[int, dict[int, list[float]]]] = {}
    for (target, w, c), tls in slices.items():
        if w != wl or target not in labels:
            continue
        for r, tl in tls:
            out.setdefault(target, {}).setdefault(c, {}).setdefault(r, []).extend(m.samples(tl))
    return out


PASSES_FLAG = "passes differ more than their windows allow"
"""The flag's words; its figures (SD across passes, within one) are in the passes table (report/terminal)."""


def _with_pass_flags(scope, passes: PassSpread | None, compared: set[int]):
    """The scope a metric's verdict rests on, with each compared C whose passes disagree more than one pass's
    interval says flagged: its pooled interval is narrower than what the server does from run to run."""
    if passes is None or not (set(passes.beyond()) & compared):
        return scope
    flagged = {c: list(f) for c, f in scope.flagged.items()}
    for c in passes.beyond():
        if c in compared:
            flagged.setdefault(c, []).append(PASSES_FLAG)
    return replace(scope, flagged=flagged)
