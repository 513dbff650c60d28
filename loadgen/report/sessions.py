"""Multi-turn sessions as the terminal and the page show them: per stage, a line on its sessions and a row per
turn index (loadgen/stage/sessions.py made the figures).

In: stage dicts (run.json) of which some carry a ``sessions`` block (and the server's view, whose window cache
hit rate goes beside the per-request one). Out: plain-text lines (:func:`session_lines`,
printed under ``loadgen run``'s stage table) and an HTML table (:func:`session_table`, a part of each workload's
detail); both "" or empty when no stage held sessions, so a run without them shows nothing of them.
"""

from __future__ import annotations

from html import escape

from loadgen.report.table import aligned, where

HEAD = ["turn", "requests", "ok", "failed", "TTFT p50", "TTFT p90", "prompt tok", "output tok", "cache hit"]
UNIT = ("TTFT in ms; prompt tok = the server's own count of the prompt it received (the history grows turn by "
        "turn); cache hit = prompt tokens the server said it served from its prefix cache, over the prompt tokens "
        "of the requests where it said so (– where it said nothing)")


def _f(v, nd: int = 2) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def summary(d: dict) -> str:
    """One stage's sessions in a sentence: those that began in the window and how they ended."""
    s = d["sessions"]["sessions"]
    ended = ", ".join(f"{n} × {cls}" for cls, n in s.get("ended_by", {}).items())
    parts = [f"{d['sessions']['planned_turns']} turns planned; {s['started']} sessions began in the window: "
             f"{s['completed']} completed every turn, {s['failed']} ended on a failed turn"
             + (f" ({ended})" if ended else "") + f", {s['cut']} cut by the stage's end"]
    if s.get("turns_per_session") is not None:
        parts.append(f"{s['turns_per_session']:.1f} turns done each (mean)")
    if s.get("duration_p50_s") is not None:
        parts.append(f"a completed session took {s['duration_p50_s']:.2f} s (p50)")
    hit = (d.get("server") or {}).get("cache_hit_rate")
    if hit is not None:
        parts.append(f"the server's /metrics: {100 * hit:.1f} % of prompt tokens from its cache over the window")
    return "; ".join(parts)


def turn_rows(d: dict) -> list[list[str]]:
    """The per-turn rows of one stage's sessions block."""
    rows = []
    for t in d["sessions"]["per_turn"]:
        hit = t.get("cache_hit_rate")
        rows.append([str(t["turn"]), str(t["started"]), str(t["completed"]), str(t["failed"]),
                     _f(t.get("ttft_p50_ms")), _f(t.get("ttft_p90_ms")), _f(t.get("prompt_tokens_mean"), 1),
                     _f(t.get("output_tokens_mean"), 1), "–" if hit is None else f"{100 * hit:.1f} %"])
    return rows


NO_SIM_CACHE = ("the embedded simulator keeps no prefix cache unless given --sim-prefix-cache TOKENS: its 0 % "
                "cache hits are its own truth, not what a server with a prefix cache (SGLang's radix cache) would serve")


def session_lines(stages: list[dict], simulator: dict | None = None) -> list[str]:
    """Each stage that held sessions: its sentence and its per-turn table; [] when none did. ``simulator``:
    the run's embedded simulator (run.json ``run.simulator``), whose prefix cache is off unless asked for."""
    out: list[str] = []
    for d in stages:
        if not d.get("sessions"):
            continue
        out += ["", f"sessions, {d['target']} {where(d)}: {summary(d)}"]
        out += aligned([HEAD, *turn_rows(d)])
    if out:
        out.append(UNIT)
        if simulator is not None and not simulator.get("prefix_cache"):
            out.append(NO_SIM_CACHE)
    return out


def session_table(stages: list[dict]) -> str:
    """The page's per-turn table of every stage that held sessions, a row per target, C and turn ("" when none
    did)."""
    body = []
    for d in stages:
        if not d.get("sessions"):
            continue
        lead = [escape(d["target"]), escape(where(d))]
        rows = turn_rows(d)
        for i, r in enumerate(rows):
            first = i == 0
            cells = [*(lead if first else ["", ""]), *map(escape, r)]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        body.append(f'<tr><td colspan="{len(HEAD) + 2}" class="unit">{escape(summary(d))}</td></tr>')
    if not body:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in ["target", "where", *HEAD])
    return (f'<table class="stages"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<div class="unit">{escape(UNIT)}</div>')
