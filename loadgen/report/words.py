"""The verdicts in words: what the page (and the terminal summary) says about an analysis.

In: the run's typed analysis (:class:`~loadgen.analysis.compare.RunAnalysis`, ``ra``: its metrics'
:class:`~loadgen.analysis.compare.MetricResult`, its coverage, ``decides``) and, for the adaptive
threshold, the run document and its :class:`~loadgen.analysis.serverview.ServerView`.
Out: one-word kinds (:func:`kind_of`, :data:`KIND_CHIP` names their chips), the rule that picks the
metrics said beside the decision (:func:`leans_against`), the per-workload decisions (:func:`headline`),
the page's one-line answer (:func:`top_sentence`), a stage's winner (:func:`winner`), the adaptive threshold
in measured running-batch terms (:func:`adaptive_hint`, any engine; :func:`threshold_sentence` per workload),
and the small text helpers the HTML pieces share (:func:`fmt_c`, :func:`slug`, …).
Plain text only: escaping is left to whoever puts it in HTML.
"""

from __future__ import annotations

import re
from typing import Callable

from loadgen import engines
from loadgen.analysis.compare import BY_NAME, MetricResult, RunAnalysis
from loadgen.analysis.configs import ConfigsResult
from loadgen.analysis.crossover import MetricAnalysis, StageComparison
from loadgen.analysis.sequential import OPEN, ending
from loadgen.report.inputs import PRIMARY, max_running, servers


def open_sentence(ra: RunAnalysis, a: MetricAnalysis, window_s: Callable[[int], float | None] | None) -> str:
    """The load points still open (analysis/sequential.ending: neither a winner nor a tie within the run's
    --tie) and how much more each needs at this spread: in seconds of each target's window where ``window_s``
    (C → the reference's window seconds there, every pass) knows them, else in times its windows; "" when none."""
    needs = []
    for c in a.comparisons:
        e = ending(c)
        if e.kind != OPEN or e.more is None:
            continue
        took = window_s(c.concurrency) if window_s is not None else None
        more = f"{max(e.more - 1, 0.1) * took:.0f} s" if took else f"{e.more:.1f}× its windows"
        needs.append(f"C={c.concurrency} (about {more}{' more per target' if took and not needs else ''})")
    if not needs:
        return ""
    passes = f" after {ra.looks} passes" if ra.looks > 1 else ""
    return (f"Open{passes}, neither a winner nor a tie within ±{a.comparisons[0].tie_margin * 100:g} %: "
            f"{', '.join(needs)} would end {'it' if len(needs) == 1 else 'each'} at this spread.")


def fmt_c(x: float) -> str:
    """A concurrency estimate as the page writes it: whole from 10 up, else one decimal (C≈24, C≈2.5)."""
    return str(int(round(x))) if x >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def without_metric(text: str) -> str:
    """A recommendation without its "metric:" prefix."""
    _, sep, rest = text.partition(": ")
    return rest if sep else text


def capitalised(text: str) -> str:
    """The first letter upper-case, the rest as it is (a recommendation starting a sentence)."""
    return text[:1].upper() + text[1:]


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not a decimal point)."""
    m = re.search(r"\.\s+(?=[A-Z(])", text)
    return text[: m.start() + 1] if m else text


def _kind(crossed: bool, verdicts: set[str], wide: bool) -> str:
    """One word for a metric's outcome from its stage verdicts: cross, spec, baseline, tie, inconclusive, …"""
    if crossed:
        return "cross"
    if verdicts == {"spec"}:
        return "spec"
    if verdicts == {"baseline"}:
        return "baseline"
    if verdicts <= {"tie"}:
        # a tie too wide to call (crossover.py §3) is not "no difference"
        return "inconclusive" if wide else "tie"
    if "spec" in verdicts and "baseline" not in verdicts:
        return "spec-some"
    if "baseline" in verdicts and "spec" not in verdicts:
        return "baseline-some"
    return "mixed"


def analysis_kind(a: MetricAnalysis) -> str:
    """One word for a metric's outcome: cross, spec, baseline, tie, inconclusive, spec-some, baseline-some, mixed."""
    return _kind(bool(a.crossovers), {c.verdict for c in a.comparisons}, any(c.wide for c in a.comparisons))


KIND_CHIP = {"cross": ("crossover", "chip-cross"), "spec": ("speculation wins", "chip-spec"),
             "baseline": ("baseline wins", "chip-base"), "tie": ("no difference", "chip-tie"),
             "spec-some": ("speculation wins some", "chip-spec"), "baseline-some": ("baseline wins some", "chip-base"),
             "mixed": ("mixed, unconfirmed", "chip-tie"), "inconclusive": ("inconclusive", "chip-tie"),
             "not compared": ("not compared", "chip-none"),
             "policy": ("switches configuration", "chip-cross"), "one best": ("one best everywhere", "chip-base")}


def configs_kind(r: ConfigsResult | None) -> str:
    """One word for a metric over three or more configurations: policy (its best changes along C), one best,
    tie (one step of configurations not told apart) or not compared."""
    if r is None or not r.policy:
        return "not compared"
    if len(r.policy) > 1:
        return "policy"
    return "one best" if len(r.policy[0].labels) == 1 else "tie"


def kind_of(m: MetricResult | None) -> str:
    """A metric's verdict kind ("not compared" for none; a file from before "verdict": from its comparisons)."""
    if m is None or not m.analysis.comparisons:
        return "not compared"
    return m.verdict or analysis_kind(m.analysis)


def leans_against(m: MetricResult | None, deciding: MetricResult | None) -> bool:
    """Whether metric ``m`` says speculation costs something where the ``deciding`` metric enables it: the
    baseline better somewhere (it wins, wins some, or crosses over) beside a speculation win or a crossover; of two
    crossovers, only one the other way round (the same way, it says what the decision says). Such a metric is
    said beside the decision, as why speculation is not free; one that agrees, or that favours speculation where
    the deciding metric does not, is a rival verdict and stays in the detail (the terminal: --verbose)."""
    kind, theirs = kind_of(m), kind_of(deciding)
    if theirs not in ("spec", "spec-some", "cross") or kind not in ("baseline", "baseline-some", "cross"):
        return False
    if kind == "cross" and theirs == "cross":
        ways = {x.direction for x in deciding.analysis.crossovers}
        return any(x.direction not in ways for x in m.analysis.crossovers)
    return True


def finding(m: MetricResult) -> str:
    """A metric's verdict without what it rests on (its caveat): the finding, or for a file from before it, the
    recommendation with the caveat cut off."""
    if m.finding:
        return m.finding
    rec, cav = m.recommendation, m.caveat
    return rec[: len(rec) - len(cav)].rstrip() if cav and rec.endswith(cav) else rec


def metric_label(ra: RunAnalysis, metric: str) -> str:
    """A metric's label ("output throughput", "goodput"): the analysis's, else the metric registry's."""
    for per in ra.workloads.values():
        if metric in per:
            return per[metric].label
    m = BY_NAME.get(metric)
    return m.label if m else metric


def not_compared_sentence(ra: RunAnalysis, wl: str) -> str:
    """Why workload ``wl`` has no decision: its coverage's sentence, else that the deciding metric was not compared."""
    cov = ra.coverage.get(wl)
    if cov is not None and cov.recommendation:
        return without_metric(cov.recommendation)
    return f"not compared: no concurrency has {metric_label(ra, ra.decides)} measured by both targets."


def headline(ra: RunAnalysis) -> list[tuple[str, str, str]]:
    """(workload, sentence, kind) per workload: the deciding metric's finding and its kind (three or more
    configurations: its policy). A workload where that metric was never compared is "not compared", with why."""
    metric = ra.decides
    out = []
    for wl, per in ra.workloads.items():
        r = ra.configs.get(wl, {}).get(metric)
        if r is not None:  # three or more configurations: the policy, not the reference against the first candidate
            out.append((wl, without_metric(ra.policy.get(wl, {}).get(metric, "")), configs_kind(r)))
        elif kind_of(per.get(metric)) != "not compared":
            out.append((wl, without_metric(finding(per[metric])), kind_of(per[metric])))
        else:
            out.append((wl, not_compared_sentence(ra, wl), "not compared"))
    order = {"policy": 0, "one best": 2, "cross": 0, "mixed": 1, "baseline": 2, "baseline-some": 2, "spec": 3,
             "spec-some": 3, "tie": 4, "inconclusive": 4, "not compared": 5}
    return sorted(out, key=lambda t: (order.get(t[2], 5), t[0] == "all", t[0]))


def top_sentence(ra: RunAnalysis) -> str:
    """The one-line answer at the top of the page, about the deciding metric."""
    items = headline(ra)
    label = metric_label(ra, ra.decides)
    if not items:
        return "No concurrency was measured by both targets, so nothing can be compared."
    crossing = [(wl, t) for wl, t, k in items if k == "cross"]
    if len(items) == 1:
        return capitalised(items[0][1])
    if ra.configs:
        n = len(ra.targets)
        return (f"{capitalised(label)} over {n} configurations: which one to use where, per workload, is below."
                if n else f"{capitalised(label)} over the configurations: the policy per workload is below.")
    if crossing:
        wl, t = crossing[0]
        t = first_sentence(t).rstrip(".")
        more = len(crossing) - 1
        return f"{wl}: {t}" + (f" — and {more} more workload{'s' if more > 1 else ''} cross over, "
                                                   "see below." if more else ".")
    kinds = {k for _, _, k in items}
    if kinds == {"spec"}:
        return f"Speculation wins {label} at every measured concurrency in every workload."
    if kinds == {"baseline"}:
        return f"The baseline wins {label} at every measured concurrency in every workload."
    never = [wl for wl, _, k in items if k == "not compared"]
    if len(never) == len(items):
        return f"Nothing was compared: no workload has {label} measured by both targets; why is below."
    if never:
        return (f"No {label} crossover in any workload compared; {', '.join(never)} "
                f"{'was' if len(never) == 1 else 'were'} not compared. The decision per workload is below.")
    return f"No {label} crossover in any workload; the decision per workload is below."


ALONE = ("* this stage's own interval excludes 0, but not once the compared stages are judged together (the "
         "simultaneous intervals the answer rests on)")
"""The footnote of a winner cell marked ``*`` (:func:`winner`)."""


def _winner(verdict: str, wide: bool, family: str | None) -> str:
    shown = family or verdict
    word = shown if shown != "tie" else "inconclusive" if wide else "tie"
    return word + "*" if family is not None and family != verdict else word


def winner(c: StageComparison, family_wise: bool = False) -> str:
    """A stage's "winner" cell: the better target's role, "tie", or "inconclusive" for a tie too wide to call.
    ``family_wise`` (the analysis's): the verdict the answer rests on, the ladder's simultaneous one, marked
    ``*`` where the stage alone says otherwise (a real vLLM's freetext stages: −25 % [−41, −4] at C=1 alone,
    a tie judged with C=2: the table said "baseline" under a sentence saying "inconclusive")."""
    return _winner(c.verdict, c.wide, c.family_verdict if family_wise else None)


def fmt_batch(b) -> str:
    """A running batch (analysis.serverview.BatchAt) as the threshold writes it; "?" where not measured."""
    return "?" if b.running is None else fmt_c(b.running)


def _batch_policy(ths: list) -> str:
    """Thresholds (in C order) as an on/off rule on the measured running batch (bounds "?" where not measured)."""
    on = ths[0].direction == "spec_to_baseline"
    parts = []
    for i, t in enumerate(ths):
        v = f"≈{fmt_batch(t.estimate)} ({fmt_batch(t.low)}–{fmt_batch(t.high)})"
        parts.append(f"{'on' if on else 'off'} below a running batch of {v}" if i == 0
                     else f"{'on' if on else 'off'} from there to {v}")
        on = not on
    return "speculation " + ", ".join(parts) + f", {'on' if on else 'off'} above it"


def _measured_at(ths: list, rows: list) -> str:
    """The stages the mapping rests on and their mean running batch: "C=4: 4, C=16: 15.8"."""
    by_c = {r.concurrency: r for r in rows if r.running_measured}
    cs = sorted({c for t in ths for b in (t.estimate, t.low, t.high) for c in (b.below, b.above) if c in by_c})
    return ", ".join(f"C={c}: {by_c[c].running_mean:.3g}" for c in cs)


def threshold_sentence(wl: str, ths: list, rows: list) -> tuple[str, list[str]]:
    """One workload's crossovers in measured running-batch terms: (the rule, what it rests on or lacks).

    ``ths``: its analysis.serverview.Threshold list; ``rows``: the speculative target's StageServer rows.
    The rule is "" when no crossover has a running batch to state it in. A crossover where the server ran
    at its cap (measured) is left out of the rule: there the batch no longer follows C, requests queue.
    """
    cross = ", ".join(f"C≈{fmt_c(t.estimate.c)} ({fmt_c(t.low.c)}–{fmt_c(t.high.c)})" for t in ths)
    capped = [t for t in ths if t.estimate.at_cap]
    batch = [t for t in ths if t.estimate.running is not None and not t.estimate.at_cap]
    extra = []
    if all(t.estimate.running is None for t in ths):
        extra.append(f"{wl}: crossover at {cross}; its running batch is {ths[0].estimate.why}")
    else:
        extra.append(f"{wl}: crossover at {cross}; mean running batch at {_measured_at(ths, rows)}")
    for t in batch:
        for what, b in (("interval's lower end", t.low), ("interval's upper end", t.high)):
            if b.running is None:
                extra.append(f"the {what} (C≈{fmt_c(b.c)}) has no running batch: {b.why}")
        if t.high.at_cap:
            extra.append(f"the interval's upper end (C≈{fmt_c(t.high.c)}) falls where the server ran at its cap of "
                         f"{t.high.cap} requests (measured)")
    for t in capped:
        extra.append(f"at C≈{fmt_c(t.estimate.c)} the server ran at its cap of {t.estimate.cap} requests "
                     "(measured) and further requests queued, so that crossover is not a batch-size threshold")
    return (f"{wl}: {_batch_policy(batch)}" if batch else ""), extra


def threshold_hint(doc: dict, ra: RunAnalysis, metric: str = PRIMARY) -> str | None:
    """:func:`adaptive_hint` for ``metric``'s crossovers (the terminal's ``loadgen report``)."""
    from loadgen.analysis.serverview import server_view

    return adaptive_hint(doc, server_view(doc, ra.baseline, ra.spec, ra.crossovers(metric), metric))


def adaptive_hint(doc: dict, view) -> str | None:
    """The crossover(s) in ``view`` (a ServerView: the deciding metric's crossovers mapped onto the running batch
    the speculative server measured, its /metrics) as an adaptive-speculation threshold, for any engine; None
    without a crossover. Where the running batch was not measured it says so: it never assumes the batch is C."""
    if not view.thresholds:
        return None
    spec = view.spec
    server = servers(doc).get(spec) or {}
    engine = view.engine.get(spec) or server.get("engine") or ""
    words = engines.get(engine)  # its title and its cap on running requests as its users set it
    name, cap_word = words.title or engine or "the speculative server", words.cap_word
    rows_of = lambda wl: view.rows.get(wl, {}).get(spec, [])  # noqa: E731
    cap = next((r.cap for wl in view.thresholds for r in rows_of(wl) if r.cap), None) or max_running(server)
    rules, rests, unmeasured = [], [], []
    for wl, ths in view.thresholds.items():
        rule, extra = threshold_sentence(wl, ths, rows_of(wl))
        if rule:
            rules.append(rule)
            rests.extend(extra)
        else:
            unmeasured.extend(extra)
    parts = []
    if rules:
        parts.append(f"For {name}, as an adaptive threshold on the running batch (the mean number of requests "
                     f"{spec}'s server ran over each window, linear in C between stages): {'; '.join(rules)}.")
        parts.append("Measured: " + "; ".join(rests) + ".")
    if unmeasured:
        parts.append(f"For {name}: no adaptive threshold in batch-size terms — {'; '.join(unmeasured)}, "
                     "so the crossover stays in concurrency terms."
                     + (f" (The server caps running requests at {cap_word} ({cap}); what it ran below that cap "
                        "was not measured.)" if cap else ""))
    if (server.get("server_info") or {}).get("speculative_adaptive"):
        parts.append("(The speculative server already ran with speculative_adaptive on.)")
    return " ".join(parts)


def slug(text: str) -> str:
    """A workload or metric name as an HTML anchor and a PNG file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "workload"
