"""The report's inputs: a run's stages checked and pooled into slices.

In: a run document (``run.json``, schema ``loadgen.run/1``). The analysis comes typed from
:func:`loadgen.analysis.answer.load`, not from here.
Out: :func:`usable` (the document without malformed stages, and why each was left out), :func:`slices`
(workload → target → C → :class:`Slice`, repeated stages pooled, each with its flags; a phase of a
``phases:`` workload over its own bins only, as the analysis takes them),
and :func:`servers` / :func:`max_running` (what the servers said about themselves).
Everything later in the report reads these, never the raw stage dicts' layout again: the stages as
:class:`Slice` (their figures stay run.json's dicts: the measurement's JSON edge).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRIMARY = "output_tokens_per_s"
"""Output throughput: the stage table's tok/s, and the metric that decides without SLOs (the analysis's
``decides`` says which one does in a run)."""


def stage_problem(s) -> str | None:
    """Why a stage dict cannot be used (a truncated or foreign entry), or None."""
    if not isinstance(s, dict):
        return "not an object"
    for key in ("target", "concurrency", "requests", "output_tokens_per_s", "client", "workloads"):
        if key not in s:
            return f"no '{key}'"
    for wl, m in s["workloads"].items():
        for key in ("requests", "output_tokens_per_s", "timeline"):
            if key not in m:
                return f"workload {wl}: no '{key}'"
    return None


def usable(doc: dict) -> tuple[dict, list[str]]:
    """The document with only well-formed stages, and one line per stage left out."""
    ok, dropped = [], []
    for i, s in enumerate(doc.get("stages") or []):
        why = stage_problem(s)
        if why is None:
            ok.append(s)
        else:
            label = f"{s.get('target', '?')} C={s.get('concurrency', '?')}" if isinstance(s, dict) else f"#{i}"
            dropped.append(f"stage {i} ({label}) left out: {why}")
    return {**doc, "stages": ok}, dropped


def servers(doc: dict) -> dict[str, dict]:
    """label → what the server said about itself (crossover runs: run.servers; single runs: targets[].server)."""
    run = doc.get("run", {})
    out = dict(run.get("servers") or {})
    for t in run.get("targets") or []:
        if isinstance(t, dict) and t.get("server") and t.get("label") not in out:
            out[t["label"]] = t["server"]
    return out


def max_running(server: dict | None) -> int | None:
    info = (server or {}).get("server_info") or {}
    v = info.get("max_running_requests")
    if not v:
        states = info.get("internal_states") or [{}]
        v = states[0].get("max_running_requests") if isinstance(states[0], dict) else None
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


@dataclass
class Slice:
    """One target at one concurrency for one workload (repeated stages pooled)."""

    target: str
    workload: str
    c: int
    d: dict
    """Summary dict: the stage's workload slice (or the merge of several)."""
    rate_bins: list[float]
    stages: list[dict]
    timelines: list[dict] = field(default_factory=list)
    """The timeline each pooled stage gives this slice (a phase's: only its phase's bins,
    loadgen.analysis.compare.slice_timeline)."""
    incomplete: bool = False
    flags: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text); kind is "client", "fail", "approx", "incomplete" or "note"."""

    @property
    def window_s(self) -> float | None:
        """Seconds of window over its pooled stages (every pass); None when none recorded one."""
        return sum((st.get("window") or {}).get("duration_s") or 0.0 for st in self.stages) or None

    def get(self, metric: str, key: str = "p50") -> float | None:
        v = self.d.get(metric)
        if isinstance(v, dict):
            if not v.get("count", 1):
                return None
            v = v.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    def bins(self, metric: str) -> list[float]:
        """``metric``'s value over each time bin of the stage windows pooled here (the samples its comparison
        rests on: loadgen.analysis.compare.CrossoverMetric.samples); [] for a metric with no per-bin form."""
        if metric == PRIMARY:
            return self.rate_bins
        from loadgen.analysis.compare import BY_NAME

        m = BY_NAME.get(metric)
        if m is None:
            return []
        return [v for tl in self.timelines if tl for v in m.samples(tl)]

    @property
    def severity(self) -> str:
        kinds = {k for k, _ in self.flags}
        return "fail" if kinds & {"fail", "incomplete"} else "warn" if kinds & {"client", "approx"} else ""


def _merge(parts: list[tuple[dict, dict]]) -> dict:
    """Pool repeated slices: histograms and counters add, over the summed windows."""
    from loadgen.stage.result import MetricSet

    if len(parts) == 1:
        return parts[0][1]
    total = None
    window = 0.0
    for stage, m in parts:
        ms = MetricSet.from_dict(m)
        window += stage["window"]["duration_s"]
        if total is None:
            total = ms
        else:
            total.merge(ms)
    bin_s = parts[0][1].get("timeline", {}).get("bin_s", 1.0)
    return total.to_dict(window, bin_s)


def slices(doc: dict) -> dict[str, dict[str, dict[int, Slice]]]:
    """workload → target → C → Slice. A stage with several workloads also counts under "all"."""
    from loadgen.analysis.compare import run_schedules, slice_timeline, window_whole

    scheds = run_schedules(doc)
    groups: dict[tuple[str, str, int], list[tuple[dict, dict]]] = {}
    for s in doc.get("stages", []):
        wls = s.get("workloads") or {}
        for wl, m in wls.items():
            groups.setdefault((wl, s["target"], s["concurrency"]), []).append((s, m))
        if len(wls) > 1:
            groups.setdefault(("all", s["target"], s["concurrency"]), []).append((s, s))
    out: dict[str, dict[str, dict[int, Slice]]] = {}
    for (wl, target, c), parts in groups.items():
        complete = [p for p in parts if window_whole(p[0])]
        use = complete or parts
        d = _merge(use)
        tls = [slice_timeline(stage, wl, scheds) for stage, _ in use]
        sl = Slice(target, wl, c, d, [v for tl in tls for v in _rate(tl)], [p[0] for p in use], tls,
                   incomplete=not complete)
        sl.flags = _flags(sl)
        out.setdefault(wl, {}).setdefault(target, {})[c] = sl
    return out


def _rate(tl: dict) -> list[float]:
    b = tl.get("bin_s") or 0
    return [v / b for v in tl.get("tokens", [])] if b > 0 else []


def _flags(sl: Slice) -> list[tuple[str, str]]:
    from loadgen.analysis.compare import cut_words, window_whole

    out = []
    for s in sl.stages:
        for r in s["client"].get("reasons", []) if s["client"].get("client_bound") else []:
            out.append(("client", f"client-bound: {r}"))
        cut = cut_words(s.get("cut"))
        if not window_whole(s):
            out.append(("incomplete", f"incomplete stage ({cut})" if cut else "incomplete stage (interrupted)"))
        elif cut:
            out.append(("incomplete", f"stage {cut}"))
        for n in s.get("notes", []):
            out.append(("note", str(n)))
    req = sl.d.get("requests", {})
    for cls, f in (req.get("failures") or {}).items():
        out.append(("fail", f"{f.get('count', 0)} failed ({cls}): {f.get('first_message', '')}".rstrip(": ")))
    if req.get("failed") and not req.get("failures"):
        out.append(("fail", f"{req['failed']} failed requests"))
    if req.get("cancelled"):
        cut = next((cut_words(s.get("cut")) for s in sl.stages if s.get("cut")), "")
        out.append(("note", f"{req['cancelled']} cancelled ({cut or 'still running when the stage ended'})"))
    if sl.d.get("token_counts") == "approximate":
        out.append(("approx", "approximate token counts (no per-chunk usage from the server)"))
    seen, uniq = set(), []
    for f in out:
        if f not in seen:
            seen.add(f)
            uniq.append(f)
    return uniq
