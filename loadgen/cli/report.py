"""``loadgen report DIR [DIR ...]``: tables, recommendations, JSON, CSV, HTML and PNGs from finished results.

One DIR (a results folder, or its run.json): the report is written beside it.
Several: their stages are pooled into one two-target run (``--out`` required),
e.g. a baseline measured with ``loadgen run --label baseline`` one day and the
speculative server another. They must share ladder and workloads.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import orjson

from loadgen import __version__, redact
from loadgen.analysis.answer import RATE, axis_of
from loadgen.analysis.answer import load as load_answer
from loadgen.analysis.compare import BY_NAME as METRICS
from loadgen.analysis.compare import roles
from loadgen.analysis.coverage import nothing_compared
from loadgen.errors import LoadgenError
from loadgen.report.html import render
from loadgen.report.inputs import PRIMARY, usable
from loadgen.report.terminal import any_compared, rate_tables, summary_text
from loadgen.run.results import csv_text, load


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("dirs", nargs="*", metavar="DIR", default=["results/crossover"],
                   help="results folder (or its run.json), default results/crossover; "
                        "several are combined (same ladder and workloads)")
    p.add_argument("--out", help="folder to write to (default: DIR itself; required when combining)")
    p.add_argument("--metric", default=None, choices=sorted(METRICS),
                   help=f"metric of the terminal table (default: the one that decides, {PRIMARY} or, with SLOs, "
                        "goodput_requests_per_s)")
    p.add_argument("--confidence", type=float, default=None,
                   help="re-analyse at this level (default: the analysis on disk, else 0.90)")
    p.add_argument("--reanalyse", action="store_true", help="recompute crossover.json even when it is up to date")
    p.add_argument("--baseline", metavar="LABEL", help="target label of the baseline (when the results do not say)")
    p.add_argument("--spec", metavar="LABEL", help="target label of the speculative server")
    p.add_argument("--no-html", action="store_true", help="tables, JSON and CSV only")
    p.add_argument("--no-png", action="store_true", help="skip the PNG plots")
    p.add_argument("--verbose", action="store_true",
                   help="every metric's verdict in the terminal, with what it rests on (report.html has them all)")


def _results_path(arg: str) -> Path:
    p = Path(arg)
    if p.is_dir():
        f = p / "run.json"
        if not f.exists():
            raise LoadgenError(f"{arg}: no run.json in this folder (not a results folder, or the run never started)")
        return f
    if not p.exists():
        raise LoadgenError(f"{arg}: no such results folder or file")
    return p


def _plan(doc: dict) -> tuple[list[int], list[str]]:
    """(ladder, workloads) a run set out to measure: its metadata, else what its stages show."""
    run = doc.get("run", {})
    ladder = run.get("ladder") or sorted({s["concurrency"] for s in doc["stages"]})
    wls = run.get("workloads") or sorted({w for s in doc["stages"] for w in s.get("workloads", {})})
    return sorted(int(c) for c in ladder), sorted(map(str, wls))


def combine(docs: list[dict], paths: list[Path]) -> dict:
    """One run document from several: stages pooled, metadata merged; ladders and workloads must agree."""
    ladder, wls = _plan(docs[0])
    found_roles: dict | None = None
    targets, servers, stages = [], {}, []
    for doc, path in zip(docs, paths):
        lad, w = _plan(doc)
        if lad != ladder:
            raise LoadgenError(f"{path}: ladder {','.join(map(str, lad))} differs from {paths[0]}'s "
                               f"{','.join(map(str, ladder))}; only runs of the same ladder and workloads combine")
        if w != wls:
            raise LoadgenError(f"{path}: workloads {','.join(w)} differ from {paths[0]}'s {','.join(wls)}; "
                               "only runs of the same ladder and workloads combine")
        run = doc.get("run", {})
        r = run.get("roles")
        if r:
            if found_roles and found_roles != r:
                raise LoadgenError(f"{path}: roles {r} contradict {found_roles} of an earlier folder")
            found_roles = r
        for t in run.get("targets") or []:
            if isinstance(t, dict) and t.get("label") not in {x.get("label") for x in targets}:
                targets.append(t)
        for label, s in (run.get("servers") or {}).items():
            servers.setdefault(label, s)
        for t in run.get("targets") or []:
            if isinstance(t, dict) and t.get("server"):
                servers.setdefault(t.get("label"), t["server"])
        stages += doc["stages"]
    runs = [d.get("run", {}) for d in docs]
    starts = [r["started_unix"] for r in runs if isinstance(r.get("started_unix"), (int, float))]
    ends = [r["finished_unix"] for r in runs if isinstance(r.get("finished_unix"), (int, float))]
    meta = {"loadgen_version": __version__, "command": "report", "combined_from": [str(p) for p in paths],
            "ladder": ladder, "workloads": wls, "targets": targets, "servers": servers,
            "interrupted": any(r.get("interrupted") for r in runs)}
    if starts:
        meta["started_unix"] = min(starts)
    if ends:
        meta["finished_unix"] = max(ends)
    if found_roles:
        meta["roles"] = found_roles
    # the plan is every run's plan; one run cut leaves the combination cut (compare.coverage reads both)
    if all(isinstance(r.get("planned_stages"), list) for r in runs):
        meta["planned_stages"] = [p for r in runs for p in r["planned_stages"]]
    cuts = [r["cut"] for r in runs if isinstance(r.get("cut"), dict)]
    if cuts:
        n = [c.get("stages_not_run") for c in cuts]
        meta["cut"] = {"by": cuts[0].get("by"), "stages_not_run": sum(n) if all(isinstance(x, int) for x in n) else None}
    sims = [r.get("simulator") for r in runs]
    if sims[0] and all(s == sims[0] for s in sims):
        meta["simulator"] = sims[0]
    return {"schema": docs[0]["schema"], "run": meta, "stages": stages}


def _check_targets(doc: dict, where: str) -> tuple[str, str]:
    labels = sorted({s["target"] for s in doc["stages"]})
    if len(labels) < 2:
        raise LoadgenError(f"{where}: results hold stages of one target only ({', '.join(labels) or 'none'}); "
                           "a report compares two (give a second results folder to combine)")
    try:
        base, spec = roles(doc)
    except LoadgenError as exc:
        raise LoadgenError(f"{where}: {exc}; name them with --baseline LABEL --spec LABEL") from None
    missing = [x for x in (base, spec) if x not in labels]
    if missing:
        raise LoadgenError(f"{where}: no stage of target {', '.join(missing)} (targets measured: "
                           f"{', '.join(labels)}); a report compares two")
    if base == spec:
        raise LoadgenError(f"{where}: baseline and speculative target are both {base!r}")
    return base, spec


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(redact.document(doc), option=orjson.OPT_INDENT_2))
    tmp.replace(path)


def run(args) -> int:
    if args.confidence is not None and not 0.5 <= args.confidence < 1.0:
        raise LoadgenError(f"--confidence must be in [0.5, 1), got {args.confidence}")
    paths = [_results_path(d) for d in args.dirs]
    if len(set(map(lambda p: p.resolve(), paths))) != len(paths):
        raise LoadgenError("the same results folder is named twice")
    loaded, dropped = [], []
    for p in paths:
        doc, bad = usable(load(p))
        dropped += [f"{p}: {b}" for b in bad]
        if not doc["stages"]:
            raise LoadgenError(f"{p}: no finished stage to report" + (f" ({bad[0]})" if bad else ""))
        loaded.append(doc)
    for line in dropped:
        print(f"loadgen: warning: {line}", file=sys.stderr)
    combined = len(loaded) > 1
    if combined and not args.out:
        raise LoadgenError("combining several results folders needs --out FOLDER for the combined report")
    doc = combine(loaded, paths) if combined else loaded[0]
    forced = False
    if args.baseline or args.spec:
        if not (args.baseline and args.spec):
            raise LoadgenError("give both --baseline and --spec, or neither")
        doc["run"] = {**doc.get("run", {}), "roles": {"baseline": args.baseline, "spec": args.spec}}
        forced = True
    where = str(args.out or args.dirs[0])
    _check_targets(doc, where)

    out = Path(args.out) if args.out else paths[0].parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LoadgenError(f"cannot create {out}: {exc.strerror}") from None
    same_place = not combined and (out / "run.json").resolve() == paths[0].resolve()
    if not same_place:
        _write_json(out / "run.json", doc)  # the report folder holds the figures it shows
    (out / "run.csv").write_text(csv_text(doc["stages"]))
    if axis_of(doc, out) == RATE:  # an open loop: rates.json and its page (report/rates.py), not crossover.json
        return _rate_report(doc, out, args, [] if same_place else [paths[0].parent / "rates.json"])

    res = _answer(out, doc, args.confidence, args.reanalyse or forced)
    nothing = "" if any_compared(res) else nothing_compared(doc)
    if nothing:  # one line, as `loadgen crossover` says it; the page and files are written all the same
        print(f"loadgen: error: {nothing}", file=sys.stderr)
    else:
        print(summary_text(doc, res, args.metric, verbose=args.verbose))
    written = [out / "crossover.json", out / "run.csv"] + ([] if same_place else [out / "run.json"])
    if not args.no_html:
        html = render(out, doc=doc, res=res, png=not args.no_png)
        written.insert(0, html)
        if not args.no_png:
            pngs = sorted((out / "plots").glob("*.png"))
            if pngs:
                written.append(out / "plots" / f"*.png ({len(pngs)})")
            else:
                print("loadgen: warning: PNG plots skipped (matplotlib is not installed)", file=sys.stderr)
    print("loadgen: wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 1 if nothing else 0


def _rate_report(doc: dict, out: Path, args, sources: list[Path]) -> int:
    """An open-loop run's report: rates.json (a fresh one beside run.json, or the one in ``sources`` that
    --out copies along, kept; else made again with its SLOs), its terminal tables and its page."""
    for src in sources:
        if src.exists() and not (out / "rates.json").exists():
            shutil.copyfile(src, out / "rates.json")
    res = _answer(out, doc, args.confidence, args.reanalyse)
    print(rate_tables(res))
    written = [out / "rates.json", out / "run.csv"] + ([out / "run.json"] if sources else [])
    if not args.no_html:
        written.insert(0, render(out, doc=doc, res=res, png=not args.no_png))
    print("loadgen: wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0


def _answer(out: Path, doc: dict, confidence: float | None, force: bool) -> dict:
    """The analysis file's dict (made again when stale or asked), what the simulator could not recompute said."""
    answer = load_answer(out, doc, confidence=confidence, force=force)
    for line in answer.notes:
        print(f"loadgen: {line}", file=sys.stderr)
    return answer.result
