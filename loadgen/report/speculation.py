"""What speculation did, second by second, as the page shows it: the evidence behind a switching flag.

In: stage dicts (run.json) with their ``speculation_timeline`` (loadgen/stage/spectimeline.py) and ``switching``
(loadgen/stage/switching.py), and the run's adaptive configurations. Out: :func:`timeline_part`, HTML with one
chart per stage worth seeing — every stage flagged for switching, then the adaptive configurations' stages —
each of tokens per chunk from the stream and the server's accept length against the window's seconds, with the
switch count, the share of chunks that carried drafts and the server's running batch in its note; "" when no
stage has a timeline of that kind (a part with nothing to show is left out).
"""

from __future__ import annotations

from html import escape

from loadgen.report.charts import BASELINE_COLOUR, SPEC_COLOUR, Chart, Series
from loadgen.report.figures import figure
from loadgen.report.table import where

MOST = 6
"""Charts at most: the flagged stages first, then the adaptive ones at the highest loads."""


def _chosen(stages: list[dict], adaptive: list[str]) -> list[dict]:
    with_tl = [d for d in stages if d.get("speculation_timeline")]
    flagged = [d for d in with_tl if (d.get("switching") or {}).get("oscillating")]
    rest = sorted((d for d in with_tl if d["target"] in adaptive and d not in flagged),
                  key=lambda d: -(d.get("rate") or d["concurrency"]))
    return (flagged + rest)[:MOST]


def _range(values: list) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return ""
    lo, hi = min(got), max(got)
    return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"


def stage_chart(d: dict) -> Chart:
    """One stage's seconds: the stream's tokens per chunk, the server's accept length where it has one."""
    tl, sw = d["speculation_timeline"], d.get("switching") or {}
    xs = tl["t_s"]
    series = [Series("tokens per chunk (stream)", xs, tl["tokens_per_chunk"], SPEC_COLOUR)]
    if tl.get("server_accept_length"):
        series.append(Series("accept length (server)", xs, tl["server_accept_length"], BASELINE_COLOUR, dash=True))
    drafting = [v for v in tl["drafting"] if v is not None]
    notes = [f"{sw['switches']} switches ({sw['per_s']:.2g}/s)" if "switches" in sw else "",
             f"chunks with drafts {100 * min(drafting):.0f}–{100 * max(drafting):.0f} % a second" if drafting else "",
             f"running batch {_range(tl.get('server_running') or [])}" if tl.get("server_running") else ""]
    flag = " — thrashing" if sw.get("oscillating") else ""
    return Chart(f"{d['target']} {where(d)}{flag}", series, xlabel="second of the window", ylabel="tokens",
                 xlog=False, yzero=True, note="; ".join(n for n in notes if n), empty="no speculation seen")


def timeline_part(stages: list[dict], adaptive: list[str]) -> str:
    """The charts of the stages worth seeing ("" when none)."""
    charts = [figure(stage_chart(d), width=400, height=260) for d in _chosen(stages, adaptive)]
    charts = [c for c in charts if c]
    if not charts:
        return ""
    return (f'<div class="grid3">{"".join(charts)}</div><div class="unit">{escape(UNIT)}</div>')


UNIT = ("tokens per chunk: on a server that streams one event a step, 1 + the drafts accepted per step, as the "
        "client saw them; accept length: the server's counters over each scrape interval (an engine that counts "
        "when a request ends books its drafts in the second it ended)")
