"""From a results file to crossover analyses: per workload, per metric, baseline vs speculative.

Each stage's steady window is cut into bins (loadgen/timeline.py); a metric's
value in each bin is one sample, and loadgen.crossover bootstraps over those
samples. Stages repeated for the same target, workload and concurrency pool
their bins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from loadgen.crossover import MetricAnalysis, StageSamples, analyze, recommendation
from loadgen.errors import LoadgenError
from loadgen.timeline import Timeline


@dataclass(frozen=True)
class CrossoverMetric:
    name: str
    label: str
    unit: str
    higher_is_better: bool

    def samples(self, tl: dict) -> list[float]:
        n = self.name
        if n == "output_tokens_per_s":
            return Timeline.rate(tl, "tokens")
        if n == "goodput_requests_per_s":
            return Timeline.rate(tl, "good")
        if n == "decode_rate":
            return Timeline.ratio(tl, "decode_rate_sum", "decode_rate_n")
        base, _, pct = n.rpartition("_p")
        # A bin's p99 needs enough samples to mean anything; p50 needs a few.
        return Timeline.percentile(tl, base, float(pct), min_count=20 if pct == "99" else 3)


METRICS = (
    CrossoverMetric("output_tokens_per_s", "output throughput", "tok/s", True),
    CrossoverMetric("decode_rate", "per-user decode rate", "tok/s", True),
    CrossoverMetric("goodput_requests_per_s", "goodput", "req/s", True),
    CrossoverMetric("ttft_p50", "TTFT p50", "ms", False),
    CrossoverMetric("ttft_p99", "TTFT p99", "ms", False),
    CrossoverMetric("itl_p50", "ITL p50", "ms", False),
    CrossoverMetric("itl_p99", "ITL p99", "ms", False),
)
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


def _slices(doc: dict) -> dict[tuple[str, str, int], list[dict]]:
    """(target, workload, C) → the timelines of every stage slice measured there."""
    out: dict[tuple[str, str, int], list[dict]] = {}
    for s in doc.get("stages", []):
        if s.get("incomplete"):
            continue
        for wl, m in s.get("workloads", {}).items():
            out.setdefault((s["target"], wl, s["concurrency"]), []).append(m["timeline"])
        if len(s.get("workloads", {})) > 1:
            out.setdefault((s["target"], "all", s["concurrency"]), []).append(s["timeline"])
    return out


def workloads_of(doc: dict) -> list[str]:
    return sorted({wl for (_, wl, _) in _slices(doc)})


def analyze_run(doc: dict, metrics=METRICS, *, confidence: float = 0.90, margin: float = 0.01,
                seed: int = 0) -> dict:
    """{workload: {metric: {"analysis": asdict(MetricAnalysis), "recommendation": str}}}."""
    base, spec = roles(doc)
    slices = _slices(doc)
    # Stages added by refinement help place a crossover but never declare one (crossover.analyze).
    ladder = doc.get("run", {}).get("ladder")
    out: dict = {"baseline": base, "spec": spec, "confidence": confidence, "workloads": {}}
    for wl in workloads_of(doc):
        per_metric = {}
        for m in metrics:
            b, s = [], []
            for (target, w, c), tls in sorted(slices.items(), key=lambda kv: kv[0][2]):
                if w != wl:
                    continue
                values = [v for tl in tls for v in m.samples(tl)]
                if len(values) < 2:
                    continue
                (b if target == base else s if target == spec else []).append(StageSamples(c, values, m.higher_is_better))
            common = {x.concurrency for x in b} & {x.concurrency for x in s}
            if not common:
                continue
            a: MetricAnalysis = analyze(m.name, b, s, confidence=confidence, margin=margin, seed=seed,
                                        ladder=ladder)
            per_metric[m.name] = {"label": m.label, "unit": m.unit, "analysis": asdict(a),
                                  "recommendation": recommendation(a).replace(m.name + ":", m.label + ":", 1)}
        out["workloads"][wl] = per_metric
    return out
