"""Results folders written by loadgen before the pipeline was made one (issue 28; main at f70f8a9, the embedded
simulators, 2026-12-04) still load and give the same decisions: ``crossover --from``, ``report`` and
``--resume`` read them as written.

* closed: ``crossover --workload chat,predictable --ladder 1,5,20 --duration 3s --warmup 1s`` (chat: enable
  speculation above C≈9.9, 90 % interval 8.1–12, the simulator's own 11.9 inside; predictable: speculation
  everywhere);
* rate: ``crossover --workload chat --rate 2,5 --duration 3s --warmup 1s`` (an open loop: its planned stages
  carry rates in the key ``concurrency``, 2.0 and 5.0).

Each run.json is kept with the analysis that loadgen wrote beside it then; the decisions (who wins where,
the crossovers and their intervals, the simulator's truth, the coverage, saturation, capacity) must be the
same now. Figures are compared to 1e-9: the analysis is deterministic (seeded bootstrap)."""

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest

from loadgen.cli import main

DATA = Path(__file__).parent / "data"


def _folder(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / "run.json").write_bytes(gzip.decompress((DATA / f"before-28-{name}.run.json.gz").read_bytes()))
    return out


def _stored(name: str, kind: str) -> dict:
    return json.loads(gzip.decompress((DATA / f"before-28-{name}.{kind}.json.gz").read_bytes()))


def _same(a, b, where: str = "") -> None:
    """``a`` equals ``b``, floats to 1e-9 relative; the first difference named by its path."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), where
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, sorted(set(a) ^ set(b)))
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (where, len(a), len(b) if isinstance(b, list) else b)
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


DECISION = ("recommendation", "verdict", "finding", "everywhere")
ANALYSIS = ("regions", "crossovers", "ladder", "unpaired")


def test_crossover_from_a_closed_run_written_before_decides_the_same(tmp_path, capsys):
    folder = _folder(tmp_path, "closed")
    assert main(["crossover", "--from", str(folder), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "enable speculation above C≈9.9 (90 % interval 8.1–12)" in out
    assert "✓ the simulator's own crossover for this traffic: C=11.9 (inside the reported interval)" in out
    now, then = json.loads((folder / "crossover.json").read_text()), _stored("closed", "crossover")
    _same(now["coverage"], then["coverage"], "coverage")
    _same(now["decides"], then["decides"], "decides")
    assert set(now["workloads"]) == set(then["workloads"]) == {"chat", "predictable"}
    for wl, per in then["workloads"].items():
        assert set(now["workloads"][wl]) == set(per), wl
        for metric, m in per.items():
            n = now["workloads"][wl][metric]
            for key in DECISION:
                _same(n.get(key), m.get(key), f"{wl}/{metric}/{key}")
            # the simulator's own crossover and whether the interval holds it (its words are written with it now)
            _same([(k["true"], k["covered"]) for k in n.get("simulator_truth", [])],
                  [(k["true"], k["covered"]) for k in m.get("simulator_truth", [])], f"{wl}/{metric}/simulator_truth")
            for key in ANALYSIS:
                _same(n["analysis"][key], m["analysis"][key], f"{wl}/{metric}/analysis/{key}")
            verdicts = [(c["concurrency"], c.get("family_verdict") or c["verdict"]) for c in m["analysis"]["comparisons"]]
            assert verdicts == [(c["concurrency"], c.get("family_verdict") or c["verdict"])
                                for c in n["analysis"]["comparisons"]], (wl, metric)


def test_crossover_from_a_rate_run_written_before_decides_the_same(tmp_path, capsys):
    folder = _folder(tmp_path, "rate")
    assert main(["crossover", "--from", str(folder), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "baseline kept up with every rate measured (up to 5 req/s)" in out
    now, then = json.loads((folder / "rates.json").read_text()), _stored("rate", "rates")
    for key in ("axis", "reference", "candidates", "points", "saturation", "capacity", "left_out"):
        _same(now[key], then[key], key)
    for wl, per_cand in then["metrics"].items():
        for cand, per in per_cand.items():
            assert set(now["metrics"][wl][cand]) == set(per)
            for metric, m in per.items():
                for key in ANALYSIS + ("comparisons",):
                    _same(now["metrics"][wl][cand][metric]["analysis"][key], m["analysis"][key],
                          f"{wl}/{cand}/{metric}/{key}")


@pytest.mark.parametrize("name", ["closed", "rate"])
def test_report_writes_its_page_from_a_run_written_before(tmp_path, name):
    folder = _folder(tmp_path, name)
    assert main(["report", str(folder), "--no-png"]) == 0
    page = (folder / "report.html").read_text()
    assert "baseline" in page and "spec" in page and "chat" in page
    if name == "closed":
        assert "C≈9.9" in page


def test_resume_of_a_finished_run_written_before_keeps_every_stage(tmp_path, cli):
    """``--resume`` reads the run's own recorded flags and planned stages (rates in ``concurrency``) and keeps
    every finished stage: nothing is run again, the analysis is the same."""
    folder = _folder(tmp_path, "rate")
    before = json.loads((folder / "run.json").read_text())
    p = cli("crossover", "--resume", str(folder), "--no-report")
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("kept from the interrupted run") == 4
    after = json.loads((folder / "run.json").read_text())
    assert after["stages"] == before["stages"]
    assert after["run"]["resumed"][-1]["stages_kept"] == 4 and after["run"]["resumed"][-1]["stages_redone"] == []
    _same(json.loads((folder / "rates.json").read_text())["points"], _stored("rate", "rates")["points"])
    shutil.rmtree(folder)
