"""The "LLM stages" tab in Locust's web UI, and a standalone page with the charts.

Uses Locust's documented extension points (examples/extend_web_ui.py):

- ``template_args["extended_tabs"]`` / ``["extended_tables"]``: a tab whose table
  lists, per finished stage and target, TTFT and ITL p50/p99, output tokens/s,
  tokens per chunk, accept length, ok/failed — plus a row for the running stage;
- ``extended_stats`` added to ``/stats/requests`` (the UI polls it every 2 s);
- ``extended_csv_files``: the run's CSV and JSON under "Download Data";
- a Flask blueprint at ``/loadgen/``: ``status.json``, ``results.csv``,
  ``results.json``, a standalone page, and ``static/loadgen.js``, which Locust's
  page also loads to draw the charts against concurrency under the tab.

All of it runs where the web UI runs (local runner or master) and reads the
conductor, i.e. the merged results. ``status.json`` adds to the conductor's status one colour per
target (report/palette.py's :func:`palette`: by position in the run's order, the reference first: a
configuration has the same colour in the tab and in its report) and, per concurrency, each target's output tok/s and the highest of them so far
(:func:`by_concurrency`: a point reading, not the analysis's judgement with intervals).
"""

from __future__ import annotations

import json
from pathlib import Path

from flask import Blueprint, Response, jsonify, request, send_from_directory

from loadgen import redact
from loadgen.report.palette import palette

STATIC = Path(__file__).parent / "static"
TAB_KEY = "loadgen"

COLUMNS = [
    ("stage", "Stage"), ("target", "Target"), ("conc", "C"),
    ("ttftp50", "TTFT p50 (ms)"), ("ttftp99", "TTFT p99 (ms)"),
    ("itlp50", "ITL p50 (ms)"), ("itlp99", "ITL p99 (ms)"),
    ("toks", "Output tok/s"), ("tpc", "Tokens/chunk"), ("accept", "Accept length"), ("spec", "Speculation"),
    ("ok", "OK"), ("fail", "Failed"), ("status", "Status"),
]
"""Keys are single lowercase words: Locust's UI camel-cases keys, which leaves these unchanged."""


def by_concurrency(status: dict) -> list[dict]:
    """Per concurrency with a written stage: every target's output tok/s (None: not run yet, or no request
    completed), the highest of those written (None while fewer than two targets have one), and whether
    every target has run there. A reading of the means, no interval: ``loadgen crossover --from`` judges."""
    targets = status.get("targets") or []
    seen: dict[int, dict[str, float | None]] = {}
    for s in status.get("stages") or []:
        ok = s.get("completed") and s.get("tokens_per_s") is not None and not s.get("incomplete")
        seen.setdefault(s["concurrency"], {})[s["target"]] = s["tokens_per_s"] if ok else None
    rows = []
    for c in sorted(seen):
        vals = {t: seen[c].get(t) for t in targets}
        have = {t: v for t, v in vals.items() if v is not None}
        best = max(have, key=have.get) if len(have) >= 2 else None
        rows.append({"concurrency": c, "tokens_per_s": vals, "best": best,
                     "complete": all(t in seen[c] for t in targets)})
    return rows


def with_views(status: dict) -> dict:
    """The conductor's status with what the page draws from it: colours and the per-C comparison."""
    return {**status, "colours": palette(status.get("targets") or []), "by_c": by_concurrency(status)}


def _n(v, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def table_rows(status: dict) -> list[dict]:
    rows = []
    total = status.get("total_stages") or 0
    for s in status["stages"]:
        flags = [f for f, on in (("incomplete", s["incomplete"]), ("client-bound", s["client_bound"]),
                                 ("thrashing", s.get("thrashing"))) if on]
        rows.append({
            "name": f"stage-{s['index']}", "stage": f"{s['index'] + 1}/{total}", "target": s["target"],
            "conc": s["concurrency"], "ttftp50": _n(s["ttft_p50"]), "ttftp99": _n(s["ttft_p99"]),
            "itlp50": _n(s["itl_p50"]), "itlp99": _n(s["itl_p99"]), "toks": _n(s["tokens_per_s"], 1),
            "tpc": _n(s["tokens_per_chunk"]), "accept": _n(s["accept_length"]), "spec": s.get("speculation", "-"),
            "ok": s["completed"], "fail": s["failed"], "status": ", ".join(flags) or "done",
        })
    cur = status.get("current")
    if cur:
        rows.append({
            "name": f"stage-{cur['index']}", "stage": f"{cur['index'] + 1}/{total}", "target": cur["target"],
            "conc": cur["concurrency"], "ttftp50": "…", "ttftp99": "…", "itlp50": "…", "itlp99": "…",
            "toks": "…", "tpc": "…", "accept": "…", "spec": "…", "ok": "", "fail": "",
            "status": f"running: {cur['phase']} ({cur['elapsed_s']:.0f} s)",
        })
    return rows


def install(environment, conductor) -> None:
    web_ui = environment.web_ui
    if web_ui is None:
        return
    app = web_ui.app
    base = (getattr(environment.parsed_options, "web_base_path", "") or "").rstrip("/")
    bp = Blueprint("loadgen", __name__, url_prefix=f"{base}/loadgen")

    def status() -> dict:
        return redact.document(with_views(conductor.status()))

    @bp.route("/")
    def page():
        return send_from_directory(STATIC, "index.html")

    @bp.route("/static/<path:name>")
    def static_file(name):
        return send_from_directory(STATIC, name)

    @bp.route("/status.json")
    def status_json():
        resp = jsonify(status())
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def _results(suffix: str, mimetype: str):
        w = conductor.writer
        if w is None or not w.path.with_suffix(suffix).exists():
            return Response("no results yet\n", status=404, mimetype="text/plain")
        return Response(w.path.with_suffix(suffix).read_bytes(), mimetype=mimetype,
                        headers={"Content-Disposition": f"attachment; filename={w.path.with_suffix(suffix).name}"})

    @bp.route("/results.csv")
    def results_csv():
        return _results(".csv", "text/csv")

    @bp.route("/results.json")
    def results_json():
        return _results(".json", "application/json")

    app.register_blueprint(bp)

    web_ui.template_args["extended_tabs"] = [{"title": "LLM stages", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./loadgen/results.csv", "title": "loadgen stage results (CSV)"},
        {"href": "./loadgen/results.json", "title": "loadgen stage results with HDR histograms (JSON)"},
    ]

    script = (b'<script src="./loadgen/static/loadgen.js" data-base="."></script>')

    @app.after_request
    def extend(response):
        ep = request.endpoint or ""
        if ep == "locust.request_stats" and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": table_rows(status())}]
            response.set_data(json.dumps(data))
        elif ep == "locust.index" and response.mimetype == "text/html" and not response.direct_passthrough:
            body = response.get_data()
            if script not in body and b"</body>" in body:
                response.set_data(body.replace(b"</body>", script + b"\n</body>", 1))
        return response
