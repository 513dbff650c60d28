"""A run's answer: which analysis it gets, that analysis with the simulator's own answer beside it, and its file.

In: a run document (run.json's dict), its results folder, the confidence and (open loop) the SLOs asked.
Out: :func:`axis_of`, the one test of a run's axis that every front and page asks (``"rate"``: an open loop,
a stage with a rate or an open_loop block; else ``"concurrency"``); :func:`analyse`, the analysis (a typed
RunAnalysis on the concurrency axis, a RateAnalysis on the rate axis) with the embedded simulators' own
answers in it (loadgen.analysis.truth), and the lines saying what the simulator could not recompute;
:func:`load`, the file when it is fresh, else the analysis made again and written; :func:`write`, the one
writer of both files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from loadgen import redact
from loadgen.analysis.sequential import look_level
from loadgen.errors import LoadgenError

if TYPE_CHECKING:  # imported where used: the axis test and the file's reader need neither
    from loadgen.analysis.compare import RunAnalysis
    from loadgen.analysis.rates import RateAnalysis

CONCURRENCY = "concurrency"
RATE = "rate"
FILES = {CONCURRENCY: "crossover.json", RATE: "rates.json"}
SCHEMA = "loadgen.answer/2"
"""The files' form; one without it (the simulator's truth as sim.known's dataclasses, before
analysis.results.Checked) is made again from run.json, as a stale one is."""
DEFAULT_CONFIDENCE = 0.90

_FRESH_KEYS = {
    # without "coverage" a crossover.json predates the verdicts that name missing and flagged stages, without
    # "decides" the gate on comparable stages and the one deciding metric: made again
    CONCURRENCY: {"baseline", "spec", "workloads", "confidence", "coverage", "decides"},
    RATE: {"axis", "reference", "candidates", "confidence", "slos", "points", "saturation", "metrics"},
}


@dataclass
class Answer:
    """The analysis of one run, and what the simulator's truth could not cover. ``result``: a RunAnalysis on
    the concurrency axis, a RateAnalysis on the rate axis."""

    axis: str
    result: RunAnalysis | RateAnalysis
    notes: list[str] = field(default_factory=list)

    @property
    def file(self) -> str:
        return FILES[self.axis]

    def to_dict(self) -> dict:
        """The file's JSON form."""
        return {**self.result.to_dict(), "schema": SCHEMA}


def axis_of(doc: dict, out: Path | None = None) -> str:
    """The stages decide, not a rates.json beside them (a folder reused by a closed-loop run after an open-loop
    one keeps the old file); with no stage at all, a rates.json in ``out`` says it."""
    stages = [s for s in doc.get("stages") or [] if isinstance(s, dict)]
    if stages:
        return RATE if any(s.get("rate") is not None or s.get("open_loop") for s in stages) else CONCURRENCY
    return RATE if out is not None and (Path(out) / FILES[RATE]).exists() else CONCURRENCY


def analyse(doc: dict, *, confidence: float = DEFAULT_CONFIDENCE, slos: list | None = None,
            truth: bool = True) -> Answer:
    """The run's analysis on its axis (``slos``: the capacity's, rate axis only; None: those its command line
    asked), with the simulator's own answers unless ``truth`` is False."""
    from loadgen.analysis.compare import configurations, run_analysis
    from loadgen.analysis.rates import rate_analysis
    from loadgen.analysis.truth import add_truth

    axis = axis_of(doc)
    if axis == RATE:
        labels, adaptive = configurations(doc)
        result = rate_analysis(doc, labels, confidence=confidence, slos=slos_asked(doc) if slos is None else slos,
                               seed=doc.get("run", {}).get("seed", 0), adaptive=adaptive)
    else:
        result = run_analysis(doc, confidence=confidence)
    return Answer(axis, result, add_truth(result, doc) if truth else [])


def slos_asked(doc: dict) -> list:
    """The SLOs the run's command line gave (``--capacity X``): none when it gave none or they do not parse."""
    from loadgen.analysis.rates import parse_slos

    argv = [str(a) for a in doc.get("run", {}).get("argv") or []]
    text = next((a.partition("=")[2] for a in argv if a.startswith("--capacity=")), None)
    if text is None and "--capacity" in argv[:-1]:
        text = argv[argv.index("--capacity") + 1]
    try:
        return parse_slos(text) if text else []
    except LoadgenError:
        return []


def _typed(axis: str, d: dict) -> RunAnalysis | RateAnalysis:
    from loadgen.analysis.compare import RunAnalysis
    from loadgen.analysis.rates import RateAnalysis

    return (RateAnalysis if axis == RATE else RunAnalysis).from_dict(d)


def write(out: Path, answer: Answer) -> Path:
    """``out/crossover.json`` or ``out/rates.json``, secrets redacted, replaced whole (never half written)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / answer.file
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(redact.document(answer.to_dict()), option=orjson.OPT_INDENT_2))
    tmp.replace(path)
    return path


def _previous(path: Path, run_path: Path, axis: str, doc: dict) -> dict | None:
    """The file's analysis when it is one of this axis and for the run's configurations, ``_stale`` when it is
    older than run.json or of another form (:data:`SCHEMA`)."""
    from loadgen.analysis.compare import roles

    try:
        d = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(d, dict) or not _FRESH_KEYS[axis] <= d.keys():
        return None
    if axis == RATE and d.get("axis") != RATE:
        return None
    if axis == CONCURRENCY and (d["baseline"], d["spec"]) != roles(doc):
        return None
    # of another form, or older than the stages: its level and SLOs are kept, its analysis made again
    d["_stale"] = d.get("schema") != SCHEMA or (run_path.exists() and path.stat().st_mtime < run_path.stat().st_mtime)
    return d


def load(out: Path, doc: dict, *, confidence: float | None = None, force: bool = False) -> Answer:
    """The analysis in ``out`` when it is fresh and at the wanted level; else made again and written: at the level
    asked, else the old file's, and (rate axis) with the SLOs the old file had, else those the command line gave."""
    axis = axis_of(doc, out)
    path = out / FILES[axis]
    old = _previous(path, out / "run.json", axis, doc) if path.exists() else None
    stale = old.pop("_stale") if old is not None else True
    if old is not None and not force and not stale and (
            confidence is None or abs(old["confidence"] - look_level(confidence, int(old.get("looks") or 1))) < 1e-9):
        return Answer(axis, _typed(axis, old))
    slos = None
    if axis == RATE and old and old.get("slos"):
        from loadgen.analysis.rates import SloTerm

        slos = [SloTerm.from_dict(s) for s in old["slos"]]
    level = confidence if confidence is not None else (old or {}).get("confidence", DEFAULT_CONFIDENCE)
    try:
        answer = analyse(doc, confidence=level, slos=slos)
    except ValueError as exc:
        raise LoadgenError(f"{out / 'run.json'}: cannot analyse: {exc}") from None
    write(out, answer)
    return answer
