"""What a run's verdicts rest on, per workload: the plan, what both targets measured, what is missing.

In: a results document (``run.json``: its ``run`` and ``stages``) and the two targets' labels.
Out: per workload a ``Coverage`` (planned, complete, missing with why, flagged, how the run was cut),
its ``Scope`` for the verdict's words and its crossover.json form ``WorkloadCoverage``; and the words
for cut stages and runs (``cut_words``, ``run_cut_words``), which the report uses too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loadgen.analysis.results import NOT_COMPARED
from loadgen.analysis.verdict import Scope
from loadgen.errors import LoadgenError
from loadgen.stage.load import planned_value


def window_whole(s: dict) -> bool:
    """A stage whose steady window ran its whole length: not incomplete, or (files written before the
    runner said so itself) cut only in the cool-down. Such a stage counts; its cut is one of its flags."""
    return not s.get("incomplete") or (s.get("cut") or {}).get("phase") == "cool-down"


def sim_starved(s: dict) -> bool:
    """A stage whose embedded simulator fell behind its own model (loadgen.serverview.simclock): what it
    served was not the modelled server, so no analysis uses it."""
    return bool((s.get("simulator") or {}).get("starved"))


def not_comparable(s: dict) -> str:
    """Why a closed-loop stage did not measure the load it claims, in one line ("" when it did): the server's
    own running gauge below C (or above it: other traffic), users whose first request was not yet streaming
    when the window opened, or a server that failed every request. Such a stage is named and not compared, never a winner with a flag: on
    an H200 a baseline stage at C=256 whose server ran a median of 36 requests read as speculation +99.7 %.
    A server at its own cap ("capped") measured its load: the rest of C queued. One request short is not
    enough: a closed loop's user is between requests at some scrapes (a simulator stage at C=4 with 32-token
    requests read 3, 3 and 4, "below C" by the check's 90 %)."""
    req = s.get("requests") or {}
    if req.get("failed") and not req.get("completed"):
        return f"every request failed ({req['failed']})"
    running = ((s.get("server") or {}).get("checks") or {}).get("running") or {}
    c = s.get("concurrency")
    if running.get("verdict") == "below C" and running["running_p50"] < c - 1:
        return f"the server ran a median of {running['running_p50']:g} of its {c} requests at once"
    if running.get("verdict") == "above C":
        return f"the server ran up to {running['running_max']:g} requests at once, more than its {c}: other traffic"
    w = s.get("warmup") or {}
    if w.get("not_streaming"):
        return (f"{w['not_streaming']} of {w['users']} users' first requests were not yet streaming when the window "
                "opened (longer --warmup)")
    return ""


# --------------------------------------------------------------------------- what a verdict rests on

CUT_BY = {"interrupt": "an interrupt", "max-stage-time": "--max-stage-time", "max-run-time": "--max-run-time",
          "max-cooldown": "the cool-down limit", "error": "an error"}


def cut_words(cut: dict | None) -> str:
    """A stage's ``cut`` record in words: "cut in the warm-up at 41 s by an interrupt" ("" for None)."""
    if not isinstance(cut, dict):
        return ""
    at = cut.get("at_s")
    where = f" in the {cut['phase']}" if cut.get("phase") else ""
    when = f" at {at:.0f} s" if isinstance(at, (int, float)) else ""
    by = CUT_BY.get(cut.get("by"), cut.get("by") or "")
    return f"cut{where}{when}" + (f" by {by}" if by else "")


def run_cut_words(run: dict) -> str:
    """How the run ended early, or "" when it ran its plan (older files: ``interrupted``)."""
    cut = run.get("cut")
    if isinstance(cut, dict):
        n = cut.get("stages_not_run")
        by = CUT_BY.get(cut.get("by"), cut.get("by") or "")
        rest = f" with {n} planned stage{'' if n == 1 else 's'} not run" if isinstance(n, int) and n > 0 else ""
        return f"the run was cut{' by ' + by if by else ''}{rest}"
    if run.get("interrupted"):
        return "the run was interrupted"
    return ""


def _stage_workloads(s: dict) -> list[str]:
    wls = list(s.get("workloads") or {})
    return wls + (["all"] if len(wls) > 1 else [])


def _components(spec: str) -> list[str]:
    """The request workload names a planned workload spec produces (a mix: each part)."""
    from loadgen.workloads.registry import split_mix

    try:
        mix = split_mix(str(spec))
    except LoadgenError:
        mix = None
    return [name for name, w in mix if w > 0] if mix else [str(spec)]


def planned_stages(doc: dict, base: str, spec: str) -> list[tuple[str, int, str]] | None:
    """(workload spec, C, target) the run meant to measure: ``run.planned_stages``, else ladder × workloads ×
    the two targets (files older than planned_stages); None when the file says neither."""
    run = doc.get("run", {})
    ps = run.get("planned_stages")
    if isinstance(ps, list):
        return [(str(p["workload"]), planned_value(p), str(p["target"])) for p in ps
                if isinstance(p, dict) and {"workload", "target"} <= p.keys() and planned_value(p) is not None]
    ladder, wls = run.get("ladder"), run.get("workloads") or ([run["workload"]] if run.get("workload") else None)
    if ladder and wls:
        return [(str(w), int(c), t) for w in wls for c in ladder for t in (base, spec)]
    return None


def _flag_labels(target: str, s: dict, m: dict) -> list[str]:
    """Short labels for what may distort one stage's figures for one workload (full texts: report/table)."""
    out = []
    if (s.get("client") or {}).get("client_bound"):
        out.append(f"{target} client-bound")
    req = m.get("requests") or {}
    if req.get("failed"):
        out.append(f"{target} failed requests")
    if m.get("token_counts") == "approximate":
        out.append(f"{target} approximate token counts")
    if s.get("cut"):
        out.append(f"{target} {cut_words(s['cut'])}")
    for n in s.get("notes") or []:
        # the note's gist, its details left to the flags list: "the load was not measured steady before the
        # warm-up's cap (0.8 s): the window opened there" -> "spec noted: the load was not measured steady ..."
        # (figures in brackets dropped, not cut at: "the window (10.0 s) is shorter than ..." read "the window");
        # the server's notes carry "server: " before theirs (it read "baseline noted: server" on the H200)
        text, by = str(n), "noted"
        if text.startswith("server: "):
            text, by = text[len("server: "):], "server noted"
        gist = re.split(r": |; ", re.sub(r" \([^)]*\)", "", text), maxsplit=1)[0].strip()
        if len(gist) > 80:
            gist = gist[:gist.rfind(" ", 0, 78)] + " ..."  # at a word's end, not inside one
        out.append(f"{target} {by}: {gist}")
    return out


@dataclass
class Coverage:
    """One workload: what the plan meant, what both targets measured, what is missing, cut or flagged."""

    workload: str
    planned: dict[str, list[int]]
    """target → planned concurrencies (empty when the file has no plan)."""
    complete: dict[str, list[int]]
    """target → concurrencies with a complete stage."""
    missing: dict[int, str]
    flagged: dict[int, list[str]]
    cut: str

    @property
    def compared(self) -> list[int]:
        sets = list(self.complete.values())
        return sorted(set(sets[0]) & set(sets[1])) if len(sets) == 2 else []

    def scope(self) -> Scope:
        planned = sorted({c for cs in self.planned.values() for c in cs})
        return Scope(planned=planned, missing=dict(self.missing), flagged=dict(self.flagged), cut=self.cut)

    def not_compared_sentence(self, stages: dict[str, dict[str, list[int]]]) -> str:
        parts = []
        for t, by in stages.items():
            bits = []
            if by["complete"]:
                bits.append(f"measured {fmt_cs(by['complete'])}")
            if by["cut"]:
                bits.append(f"cut at {fmt_cs(by['cut'])}")
            if by["unfit"]:
                bits.append(f"not comparable at {fmt_cs(by['unfit'])}")
            if by["not_run"]:
                bits.append(f"did not run {fmt_cs(by['not_run'])}")
            parts.append(f"{t}: {' and '.join(bits) or 'no stage'}")
        cut = f"; {self.cut}" if self.cut else ""
        return (f"{self.workload}: not compared: no concurrency has complete stages of both targets "
                f"({'; '.join(parts)}{cut}).")

    def result(self, recommendation: str = "") -> "WorkloadCoverage":
        return WorkloadCoverage("compared" if self.compared else NOT_COMPARED, dict(self.planned), self.compared,
                                dict(sorted(self.missing.items())), dict(sorted(self.flagged.items())), self.cut,
                                recommendation)

    def to_dict(self, recommendation: str = "") -> dict:
        return self.result(recommendation).to_dict()


@dataclass
class WorkloadCoverage:
    """crossover.json's ``coverage`` entry of one workload, typed: what was compared and what was not.

    ``recommendation``: for a workload never compared, the sentence that says so ("" otherwise).
    """

    status: str
    """"compared" or "not compared"."""
    planned: dict[str, list[int]]
    compared: list[int]
    missing: dict[int, str]
    flagged: dict[int, list[str]]
    cut: str
    recommendation: str = ""

    def scope(self) -> Scope:
        planned = sorted({c for cs in self.planned.values() for c in cs})
        return Scope(planned=planned, missing=dict(self.missing), flagged=dict(self.flagged), cut=self.cut)

    def to_dict(self) -> dict:
        d = {"status": self.status,
             "planned": {t: cs for t, cs in self.planned.items()},
             "compared": self.compared,
             "missing": [{"concurrency": c, "why": w} for c, w in sorted(self.missing.items())],
             "flagged": [{"concurrency": c, "flags": f} for c, f in sorted(self.flagged.items())],
             "cut": self.cut}
        if self.recommendation:
            d["recommendation"] = self.recommendation
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "WorkloadCoverage":
        return cls(d.get("status", ""), {t: list(cs) for t, cs in (d.get("planned") or {}).items()},
                   list(d.get("compared") or []), {m["concurrency"]: m["why"] for m in d.get("missing") or []},
                   {f["concurrency"]: list(f["flags"]) for f in d.get("flagged") or []}, d.get("cut", ""),
                   d.get("recommendation", ""))


def fmt_cs(cs) -> str:
    return "C=" + ", ".join(str(c) for c in sorted(cs))


def coverage(doc: dict, base: str, spec: str) -> tuple[dict[str, Coverage], dict[str, str]]:
    """Per workload: its Coverage, and (for workloads never compared) the sentence that says so."""
    run = doc.get("run", {})
    stages = doc.get("stages", [])
    observed = sorted({wl for s in stages for wl in _stage_workloads(s)})
    planned = _planned_by_workload(doc, base, spec, observed)
    cut = run_cut_words(run)
    # why a planned stage was not run, where the runner said (saturated, or a budget that cannot buy its window)
    skipped = {(str(x.get("target")), str(x.get("workload")), x.get("value")): str(x["why"])
               for x in run.get("not_run") or [] if isinstance(x, dict) and x.get("why")}
    out: dict[str, Coverage] = {}
    sentences: dict[str, str] = {}
    for wl in sorted(set(observed) | set(planned)):
        st = _stage_states(stages, wl, base, spec)
        plan_wl = {t: planned.get(wl, {}).get(t, set()) for t in (base, spec)}
        both = st.complete[base] & st.complete[spec]
        missing = _missing(st, plan_wl, both, skipped, wl, base, spec)
        flagged = _flagged(stages, wl, st.complete, both)
        cov = Coverage(wl, {t: sorted(v) for t, v in plan_wl.items()},
                       {t: sorted(v) for t, v in st.complete.items()}, missing, flagged, cut)
        out[wl] = cov
        if not both:
            by = {t: {"complete": sorted(st.complete[t]), "cut": sorted(set(st.cut_at[t]) - st.complete[t]),
                      "unfit": sorted(set(st.unfit_at[t]) - st.complete[t]),
                      "not_run": sorted(plan_wl[t] - st.complete[t] - set(st.cut_at[t]) - set(st.unfit_at[t]))}
                  for t in (base, spec)}
            sentences[wl] = cov.not_compared_sentence(by)
    return out, sentences


def _planned_by_workload(doc: dict, base: str, spec: str, observed: list[str]) -> dict[str, dict[str, set[int]]]:
    """workload name → target → the concurrencies the plan meant it to run (empty without a plan): a mix's
    parts each, and "all" where the stages show it; a plan name no stage shows, beside stage names no plan
    shows, gives those names the whole plan."""
    plan = planned_stages(doc, base, spec)
    planned: dict[str, dict[str, set[int]]] = {}
    if plan is None:
        return planned
    named: dict[str, dict[str, set[int]]] = {}
    for w, c, t in plan:
        comps = _components(w)
        for name in comps + (["all"] if len(comps) > 1 else []):
            named.setdefault(name, {}).setdefault(t, set()).add(c)
    unmatched = [w for w in observed if w not in named]
    union: dict[str, set[int]] = {}
    for w, c, t in plan:
        union.setdefault(t, set()).add(c)
    for name, by_t in named.items():
        # a planned name that no stage shows, beside stages under names no plan shows (a dataset file's
        # spec is its path, its requests carry the dataset's name): the same workload, named twice
        if name in observed or not unmatched:
            if name != "all" or name in observed:
                planned[name] = by_t
    for w in unmatched:
        planned[w] = {t: set(cs) for t, cs in union.items()}
    return planned


@dataclass
class _StageStates:
    """One workload's stages of the two targets sorted by what they can give: target → concurrencies."""

    complete: dict[str, set[int]]
    """a whole window of its load: comparable."""
    cut_at: dict[str, dict[int, list[dict]]]
    """cut in the window (the stages, for their cut's words)."""
    unfit_at: dict[str, dict[int, str]]
    """a whole window that did not measure its load (why: ``not_comparable``)."""


def _stage_states(stages: list[dict], wl: str, base: str, spec: str) -> _StageStates:
    st = _StageStates({base: set(), spec: set()}, {base: {}, spec: {}}, {base: {}, spec: {}})
    for s in stages:
        t = s.get("target")
        if t not in st.complete or wl not in _stage_workloads(s):
            continue
        if not window_whole(s):
            st.cut_at[t].setdefault(s["concurrency"], []).append(s)
        elif why := not_comparable(s):
            st.unfit_at[t].setdefault(s["concurrency"], why)
        else:
            st.complete[t].add(s["concurrency"])
    return st


def _missing(st: _StageStates, plan_wl: dict[str, set[int]], both: set[int], skipped: dict, wl: str, base: str,
             spec: str) -> dict[int, str]:
    """Each concurrency planned, cut or unfit that the two targets did not both measure, with why (per target;
    a reason both share said once)."""
    missing: dict[int, str] = {}
    consider = set().union(*plan_wl.values(), *(set(v) for v in st.cut_at.values()),
                           *(set(v) for v in st.unfit_at.values()))
    for c in sorted(consider - both):
        whys = []
        for t in (base, spec):
            if c in st.complete[t]:
                continue
            if c in st.unfit_at[t]:
                whys.append(f"{t} not comparable: {st.unfit_at[t][c]}")
            elif c in st.cut_at[t]:
                words = [cut_words(s.get("cut")) for s in st.cut_at[t][c]]
                whys.append(f"{t} {next((w for w in words if w), 'incomplete (interrupted)')}")
            elif c in plan_wl[t]:
                why = skipped.get((t, wl, c))
                whys.append(f"{t} not run" + (f" ({why})" if why else ""))
            else:
                whys.append(f"{t} not planned")
        if whys == [f"{base} not run", f"{spec} not run"]:
            missing[c] = "not run"
        elif len(set(w.split(" ", 1)[1] for w in whys)) == 1 and whys[0].split(" ", 1)[1].startswith("not run ("):
            missing[c] = whys[0].split(" ", 1)[1]  # both, for the one reason: said once
        else:
            missing[c] = ", ".join(whys)
    return missing


def _flagged(stages: list[dict], wl: str, complete: dict[str, set[int]], both: set[int]) -> dict[int, list[str]]:
    """Compared concurrency → the short labels of what may have distorted its stages' figures, once each."""
    flagged: dict[int, list[str]] = {}
    for s in stages:
        t = s.get("target")
        if t not in complete or not window_whole(s) or s["concurrency"] not in both:
            continue
        if wl not in _stage_workloads(s):
            continue
        m = s if wl == "all" else s["workloads"][wl]
        for label in _flag_labels(t, s, m):
            if label not in flagged.setdefault(s["concurrency"], []):
                flagged[s["concurrency"]].append(label)
    return {c: f for c, f in flagged.items() if f}


def why_unusable(s: dict) -> str:
    """Why a stage gave no comparison in one short clause, the same for every stage it fits ("" when it
    measured its load): a run with nothing compared says how many stages each reason took."""
    if not window_whole(s):
        cut = s.get("cut") or {}
        by = CUT_BY.get(cut.get("by"), cut.get("by") or "")
        return f"cut in the {cut.get('phase') or 'window'}" + (f" by {by}" if by else "")
    if sim_starved(s):
        return "whose embedded simulator fell behind its model"
    req = s.get("requests") or {}
    if not req.get("completed"):
        return f"with no request completed ({req['failed']} failed)" if req.get("failed") else "with no request completed"
    why = not_comparable(s)
    if why.startswith("the server ran a median"):
        return "whose server ran fewer requests at once than C"
    if "not yet streaming" in why:
        return "whose first requests were not yet streaming when the window opened"
    return "with other traffic on the server" if why else ""


def nothing_compared(doc: dict) -> str:
    """One line for a run in which no concurrency has comparable stages of two configurations: how many stages
    each reason took (dead server, every stage cut, unsteady), else "" when something was compared."""
    tally: dict[str, int] = {}
    for s in doc.get("stages", []):
        why = why_unusable(s) or "measured, without a comparable stage of another configuration at its C"
        tally[why] = tally.get(why, 0) + 1
    n = sum(tally.values())
    parts = [f"{k} of {n} stages {why}" for why, k in sorted(tally.items(), key=lambda x: -x[1])]
    skipped: dict[str, int] = {}
    for x in doc.get("run", {}).get("not_run") or []:
        why = str(x.get("why", "")) if isinstance(x, dict) else ""
        key = ("not run: the run's budget could not buy a steady window" if "steady window" in why else
               "not run: the server saturated at a lower load" if why.startswith("saturated") else "not run")
        skipped[key] = skipped.get(key, 0) + 1
    parts += [f"{k} planned stage{'s' if k > 1 else ''} {why}" for why, k in skipped.items()]
    cut = run_cut_words(doc.get("run", {}))
    if not parts:
        return "no stage was run" + (f" ({cut})" if cut else "")
    return f"nothing compared: {', '.join(parts)}" + (f"; {cut}" if cut and not skipped else "")
