"""A workload's "What the server ran" part of the page: the servers' own /metrics figures per stage.

In: a :class:`~loadgen.analysis.serverview.ServerView` (analysis/serverview.py, from run.json's
per-stage ``server`` blocks and crossover.json) and a workload's name. Out: an HTML fragment:

- per target a table by C: running batch (median and mean of the running-requests gauge over the
  window, its max), the verdict against C, queue (mean), llama.cpp's busy slots per decode step
  (only where an engine reports it), KV usage, and the client-vs-server token check;
- for the speculative target, accept length and acceptance per position (share of drafts whose
  k-th token was accepted) per C;
- the adaptive-speculation threshold from the measured running batch (words.threshold_sentence).

A target whose server had no readable /metrics gets one line saying why, no table and no figure; a workload
where no stage of any target had server figures gets no part at all ("").
"""

from __future__ import annotations

from html import escape

from loadgen.analysis.serverview import ServerView, StageServer
from loadgen.report.words import capitalised, threshold_sentence

DASH = "—"
VERDICT_CLS = {"runs C": "sv-ok", "capped": "sv-ok", "below C": "sv-bad", "above C": "sv-bad"}
"""How a running-batch verdict is shown: the ones that say the stage's load was not C on the server stand out."""


def _n(v: float | None, fmt: str = ".3g") -> str:
    return DASH if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return DASH if v is None else f"{v * 100:.3g} %"


def _cell(text: str, title: str = "", cls: str = "") -> str:
    t = f' title="{escape(title)}"' if title else ""
    c = f' class="{cls}"' if cls else ""
    return f"<td{c}{t}>{escape(text)}</td>"


def _tokens_cells(r: StageServer) -> str:
    """client, server, diff %, verdict: of the stage (of each stage, joined, when repeated ones were pooled)."""
    if not r.tokens:
        return _cell(DASH) * 3 + _cell("not compared")
    join = lambda xs: " / ".join(xs)  # noqa: E731
    client = join(_n(t.client, ".0f") for t in r.tokens)
    server = join(_n(t.server, ".0f") for t in r.tokens)
    diff = join(DASH if t.diff_pct is None else f"{t.diff_pct:+.2f} %" for t in r.tokens)
    words = join(t.verdict for t in r.tokens)
    why = "; ".join(t.why for t in r.tokens if t.why)
    bad = any(t.verdict == "disagree" for t in r.tokens)
    return (_cell(client) + _cell(server) + _cell(diff)
            + _cell(words, why, "sv-bad" if bad else "sv-ok" if all(t.verdict == "agree" for t in r.tokens) else ""))


def _target_table(label: str, rows: list[StageServer]) -> str:
    busy = any(r.busy_per_step is not None for r in rows)
    head = ("<tr><th>C</th><th>running (median)</th><th>running (mean)</th><th>running (max)</th><th>vs C</th>"
            "<th>queued (mean)</th>" + ("<th>busy slots / decode step</th>" if busy else "")
            + "<th>KV usage (mean)</th><th>tokens: client</th><th>server</th><th>diff</th><th>check</th></tr>")
    body = []
    for r in rows:
        c = f"{r.concurrency}" + (f" ×{r.stages}" if r.stages > 1 else "")
        if not r.available:
            span = 11 + busy
            body.append(f"<tr><td>{escape(c)}</td><td colspan=\"{span}\" class=\"muted\">"
                        f"no server figures: {escape(r.reason)}</td></tr>")
            continue
        vs = r.running_verdict + (f" ({r.cap})" if r.running_verdict == "capped" and r.cap else "")
        cells = (_cell(c) + _cell(_n(r.running_p50)) + _cell(_n(r.running_mean)) + _cell(_n(r.running_max))
                 + _cell(vs, cls=VERDICT_CLS.get(r.running_verdict, "")) + _cell(_n(r.queued_mean))
                 + (_cell(_n(r.busy_per_step)) if busy else "") + _cell(_pct(r.kv_usage_mean)) + _tokens_cells(r))
        title = "; ".join(r.notes + ([f"the stage also ran {', '.join(r.shared_with)}: the server's figures cover "
                                      "them all"] if r.shared_with else []))
        body.append(f'<tr title="{escape(title)}">{cells}</tr>' if title else f"<tr>{cells}</tr>")
    return (f'<table class="tbl server"><caption>{escape(label)}</caption><thead>{head}</thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _acceptance_table(label: str, rows: list[StageServer]) -> str:
    rows = [r for r in rows if r.available and (r.mean_accept_length is not None or r.acceptance_per_position)]
    if not rows:
        return ""
    k = max((len(r.acceptance_per_position or []) for r in rows), default=0)
    rate = any(r.accept_rate is not None for r in rows)
    head = ("<tr><th>C</th><th>accept length</th>" + ("<th>accept rate</th>" if rate else "")
            + "".join(f"<th>position {i + 1}</th>" for i in range(k)) + "</tr>")
    body = []
    for r in rows:
        app = r.acceptance_per_position or []
        cells = (_cell(str(r.concurrency)) + _cell(_n(r.mean_accept_length, ".3f"))
                 + (_cell(_pct(r.accept_rate)) if rate else "")
                 + "".join(_cell(_pct(app[i]) if i < len(app) else DASH) for i in range(k)))
        body.append(f"<tr>{cells}</tr>")
    note = ("position k: share of drafts whose k-th token was accepted (the server's per-position counters over "
            "the window)" if k else "the server's /metrics counts no acceptance per position; accept length from "
            "its counters (tokens per verify step, the bonus token included)")
    short = [r.mean_draft_length for r in rows if r.mean_draft_length is not None]
    if k and short and min(short) < k - 0.05:
        # the server counts drafts, not drafts that reached position k: a share there is of all drafts
        note += (f"; drafts proposed {min(short):.1f}–{max(short):.1f} of {k} tokens on average (a draft ends where "
                 "its source does: an n-gram match's continuation), so a later position's share counts drafts that "
                 "never reached it")
    return (f'<table class="tbl server"><caption>{escape(label)}: acceptance from its counters</caption>'
            f'<thead>{head}</thead><tbody>{"".join(body)}</tbody></table><p class="muted">{escape(note)}</p>')


def server_html(view: ServerView, wl: str, labels: list[str] | None = None) -> str:
    """The "What the server ran" part of workload ``wl``'s section; ``labels``: every configuration of the run,
    the reference first (default: the view's two)."""
    per = view.rows.get(wl, {})
    labels = list(labels or (view.baseline, view.spec))
    if not any(r.available for label in labels for r in per.get(label, [])):
        return ""  # no stage of this workload had server figures: nothing to show
    unavailable = dict(view.unavailable)
    for label in labels:  # the view says why only for its two; the rows say it for the others
        rows = [r for p in view.rows.values() for r in p.get(label, [])]
        if label not in unavailable and rows and not any(r.available for r in rows):
            unavailable[label] = rows[0].reason
    out = ["<h3>What the server ran</h3>",
           '<p class="muted">from each server\'s own /metrics, scraped at the window\'s edges and between them: '
           "running and queued requests are its gauges over the window; the token check sets the client's count "
           "beside the server's generated-token counter over the same two scrapes (agreement within 1 %)</p>"]
    for label in labels:
        rows = per.get(label, [])
        if label in unavailable:
            out.append(f'<p class="muted"><b>{escape(label)}</b>: no server figures — '
                       f"{escape(unavailable[label])}</p>")
        elif rows:
            out.append(_target_table(label, rows))
    for label in labels[1:]:  # the candidates' acceptance (the reference's server does not speculate)
        if label not in unavailable:
            out.append(_acceptance_table(label, per.get(label, [])))
    spec_rows = per.get(view.spec, [])
    ths = view.thresholds.get(wl) if len(labels) <= 2 else None  # three or more: the policy table says it
    if ths:
        rule, extra = threshold_sentence(wl, ths, spec_rows)
        text = (f"Adaptive threshold on {view.spec}'s measured running batch: {rule.partition(': ')[2]}."
                if rule else "No adaptive threshold in batch-size terms.")
        rests = "; ".join(e.partition(": ")[2] if e.startswith(wl + ": ") else e for e in extra)
        text += " " + capitalised(rests) + "."
        out.append(f'<p class="hint">{escape(text)}</p>')
    return "".join(x for x in out if x)
