"""Result files, written as each stage ends so an interrupted run keeps what it measured.

``FILE.json`` (schema ``loadgen.run/1``, docs/metrics.md §Result schema):
``{"schema", "run": {...}, "stages": [stage, ...]}`` — rewritten atomically after
every stage, so it is valid JSON at any moment. Beside it, ``FILE.csv`` (one
row per stage, target and workload) and ``FILE.hlog`` (every stage's
histograms in HdrHistogram's interval-log format, one tagged line each).
"""

from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path

import orjson

from loadgen import __version__, redact
from loadgen.errors import LoadgenError
from loadgen.histograms import Hist
from loadgen.metrics import BY_NAME, REGISTRY
from loadgen.stage.result import StageResult, stage_load

RUN_SCHEMA = "loadgen.run/1"
# (metric, summary key, column) of the metric columns: each metric declares its own (``csv_stats``).
CSV_METRIC_COLUMNS = [(m.name, stat, column) for m in REGISTRY for column, stat in m.csv_columns()]
CSV_COLUMNS = (
    ["target", "workload", "concurrency", "stage_index", "window_s", "started", "completed", "failed",
     "output_tokens_per_s", "requests_per_s", "goodput_requests_per_s", "token_counts"]
    + [column for _, _, column in CSV_METRIC_COLUMNS]
    + ["client_bound", "rate"]
)
"""``rate``: an open-loop stage's offered requests/s (its ``concurrency`` is then its in-flight cap, 0 for none)."""


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ResultsWriter:
    def __init__(self, path: str | Path, run_meta: dict, *, resume: dict | None = None) -> None:
        """``resume``: the document of an interrupted run (:func:`load_for_resume`) this one continues: its
        finished stages wait in ``pending`` until the ramp reaches their place (:meth:`take`), when they are
        written again exactly as they were; a stage cut by the interrupt is dropped (the ramp runs it again)."""
        self.path = Path(path)
        if self.path.suffix != ".json":
            self.path = self.path.with_suffix(".json")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LoadgenError(f"cannot create results folder {self.path.parent}: {exc.strerror}") from None
        self.run = {"loadgen_version": __version__, "started_unix": time.time(), **run_meta}
        self._t0_ns = time.perf_counter_ns()  # hlog timestamps are seconds since this
        self.stages: list[dict] = []
        self.pending: list[dict] = []
        """An interrupted run's finished stages, not yet reached by the resumed ramp."""
        if resume is not None:
            self._resume(resume)
        self._flush()
        self.hlog_path = self.path.with_suffix(".hlog")
        with open(self.hlog_path, "w") as f:
            f.write(f"#[loadgen {__version__} histogram log; values in microseconds, max in ms]\n")
            f.write("#[StartTime: %.3f]\n" % self.run["started_unix"])
            f.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')

    def add_stage(self, res: StageResult, **extra) -> dict:
        """``extra``: keys the stage's dict carries beside its figures (``retried``: run twice, and why)."""
        d = res.to_dict() | extra
        self.stages.append(d)
        self._flush()
        self._append_hlog(d)
        return d

    def _resume(self, doc: dict) -> None:
        old = doc["run"]
        started = old.get("started_unix", self.run["started_unix"])
        self.run["started_unix"] = started
        # the hlog's clock: the run's start on this host's monotonic clock (stages kept from the first
        # process and those run now share it: CLOCK_MONOTONIC is system-wide)
        self._t0_ns = time.perf_counter_ns() - int((time.time() - started) * 1e9)
        for label, probed in (old.get("servers") or {}).items():  # a server not started again is still known
            self.run.setdefault("servers", {}).setdefault(label, probed)
        kept, redone = [], []
        for d in doc.get("stages", []):
            if (d.get("cut") or {}).get("by") == "interrupt":
                redone.append(_stage_words(d))
            else:
                kept.append(d)
        self.pending = kept
        # the run's own flags stay its argv (a resumed run is resumed again by them); this invocation's beside
        self.run["resumed"] = [*old.get("resumed", []), {"at_unix": time.time(), "argv": self.run.get("argv"),
                                                         "stages_kept": len(kept), "stages_redone": redone}]
        if "argv" in old:
            self.run["argv"] = old["argv"]

    def take(self, target: str, stage_index: int, load: float) -> dict | None:
        """The interrupted run's stage at this place (target, index in the run, ladder value), written again
        as it was; None: it has none (the ramp runs the stage). Kept stages the ramp went past are dropped."""
        while self.pending and self.pending[0]["stage_index"] < stage_index:
            self._drop(self.pending.pop(0))
        if not self.pending:
            return None
        d = self.pending[0]
        if d["stage_index"] != stage_index or d["target"] != target or stage_load(d) != load:
            return None
        self.pending.pop(0)
        self.stages.append(d)
        self._flush()
        self._append_hlog(d)
        return d

    def _drop(self, d: dict) -> None:
        self.run["resumed"][-1].setdefault("dropped", []).append(_stage_words(d))

    def finish(self, **extra) -> None:
        while self.pending:  # a resumed run that did not reach them (cut, or asked for fewer stages)
            self._drop(self.pending.pop(0))
        self.run.update(extra)
        self.run["finished_unix"] = time.time()
        self._flush()

    def flush(self) -> None:
        """Write run.json again (after ``run`` changed between stages)."""
        self._flush()

    def doc(self) -> dict:
        """The results document as written so far (what :func:`load` reads back)."""
        return {"schema": RUN_SCHEMA, "run": self.run, "stages": self.stages}

    def _flush(self) -> None:
        # secrets (header values, URL credentials) masked as written (loadgen/redact.py); the live document keeps them
        doc = redact.document(self.doc())
        _atomic_write(self.path, orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        _atomic_write(self.path.with_suffix(".csv"), csv_text(doc["stages"]).encode())

    def _append_hlog(self, d: dict) -> None:
        start = (d["window"]["start_ns"] - self._t0_ns) / 1e9
        length = d["window"]["duration_s"]
        lines = []
        for name, text in d.get("histograms", {}).items():
            m = BY_NAME[name]
            h = Hist.decode(text, m.scale, m.unit)
            if not h.count:
                continue
            where = f"r{d['rate']:g}" if d.get("rate") is not None else f"c{d['concurrency']}"
            tag = f"{d['target']}/{where}/s{d['stage_index']}/{name}"
            lines.append(f"Tag={redact.text(tag)},{start:.3f},{length:.3f},{h.h.get_max_value() / 1000:.3f},{text}\n")
        with open(self.hlog_path, "a") as f:
            f.writelines(lines)


def _stage_words(d: dict) -> str:
    return f"stage {d.get('stage_index')} {d.get('target')} at {stage_load(d):g}"


def csv_text(stages: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for d in stages:
        rows = [("all", d)] + sorted(d.get("workloads", {}).items())
        if len(rows) == 2:  # one workload: its row equals the total
            rows = [(rows[1][0], d)]
        for wl, m in rows:
            req = m["requests"]
            row = [d["target"], wl, d["concurrency"], d["stage_index"], d["window"]["duration_s"], req["started"],
                   req["completed"], req["failed"], m["output_tokens_per_s"], m["requests_per_s"],
                   m["goodput_requests_per_s"], m["token_counts"]]
            row += [m.get(metric, {}).get(stat, "") for metric, stat, _ in CSV_METRIC_COLUMNS]
            row += [d["client"]["client_bound"], d.get("rate", "")]
            w.writerow(row)
    return redact.text(buf.getvalue())


def load(path: str | Path) -> dict:
    """A results file, checked enough to say what is wrong in one line."""
    p = Path(path)
    try:
        doc = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise LoadgenError(f"results file not found: {p}") from None
    except orjson.JSONDecodeError as exc:
        raise LoadgenError(f"{p}: not valid JSON (truncated?): {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != RUN_SCHEMA:
        raise LoadgenError(f"{p}: not a loadgen results file (schema {RUN_SCHEMA} expected)")
    return doc


def load_for_resume(path: str | Path, command: str) -> tuple[Path, dict]:
    """``--resume PATH``: the run's results file (PATH/run.json for a folder) and its document, checked to be
    a ``command`` run this loadgen can continue; anything else is one line."""
    p = Path(path)
    if p.is_dir():
        p = p / "run.json"
        if not p.is_file():
            raise LoadgenError(f"--resume {path}: not a loadgen run (no run.json in it)")
    elif not p.is_file():
        raise LoadgenError(f"--resume {path}: no such folder or file")
    try:
        doc = orjson.loads(p.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise LoadgenError(f"--resume {p}: not valid JSON: {exc}") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or not schema.startswith("loadgen.run/") or not isinstance(doc.get("run"), dict):
        raise LoadgenError(f"--resume {p}: not a loadgen run (schema {RUN_SCHEMA} expected)")
    if schema != RUN_SCHEMA:
        raise LoadgenError(f"--resume {p}: written in schema {schema}; this loadgen continues {RUN_SCHEMA} runs "
                           "only (run it again)")
    was = doc["run"].get("command")
    if was != command:
        raise LoadgenError(f"--resume {p}: a `loadgen {was}` run, not a `loadgen {command}` one")
    if not isinstance(doc["run"].get("settings"), dict):
        raise LoadgenError(f"--resume {p}: records no settings to check this invocation against (written by "
                           f"loadgen {doc['run'].get('loadgen_version', '?')}, before --resume)")
    return p, doc
