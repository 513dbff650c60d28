"""``loadgen report``: output, files, combining folders, and one-line errors for bad input."""

import re

import orjson
import pytest

from loadgen.cli import main
from tests.report.synth import run_doc, stage, write_run


def _report(capsys, *argv):
    rc = main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(rc, err, *needles):
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loadgen: error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in err


def test_report_prints_tables_and_writes_everything(synth_dir, capsys):
    (synth_dir / "run.csv").unlink(missing_ok=True)
    rc, out, err = _report(capsys, synth_dir, "--no-png")
    assert rc == 0, err
    assert "  → output throughput: enable speculation below C≈" in out
    assert "workload chat: output throughput (tok/s), 90 % intervals" in out
    assert "  C  baseline    spec    Δ %" in out
    assert "goodput:" not in out and "running batch" in out  # goodput agrees: said in --verbose and the report
    # the flags once, each stage's (synth: client-bound at C=1, approximate counts at C=5, 503s at C=100)
    flags = out[out.index("\nflags:\n"):].splitlines()[2:]
    assert [x.split(":")[0] for x in flags if not x.startswith("  client-bound at")] == [
        "  baseline C=1 (chat)", "  baseline C=5 (chat)", "  spec C=100 (chat)"], out
    assert "http_503" in flags[2]
    for name in ("report.html", "crossover.json", "run.csv"):
        assert (synth_dir / name).exists(), name
    assert not (synth_dir / "plots").exists()
    assert "report.html" in err
    rc, out, err = _report(capsys, synth_dir, "--no-png", "--no-html", "--verbose")
    assert rc == 0 and "  · goodput: " in out and "Flagged (figures may be distorted)" in out, out


def test_table_of_another_metric(synth_dir, capsys):
    rc, out, _ = _report(capsys, synth_dir, "--no-html", "--metric", "ttft_p50")
    assert rc == 0 and "TTFT p50 (ms)" in out
    assert not (synth_dir / "report.html").exists()


def test_missing_folder_or_file(tmp_path, capsys):
    _one_line_error(*_report(capsys, tmp_path / "nope")[::2], "no such results folder")
    (tmp_path / "empty").mkdir()
    _one_line_error(*_report(capsys, tmp_path / "empty")[::2], "no run.json")


def test_truncated_run_json(synth_dir, capsys):
    data = (synth_dir / "run.json").read_bytes()
    (synth_dir / "run.json").write_bytes(data[: len(data) // 2])
    _one_line_error(*_report(capsys, synth_dir)[::2], "not valid JSON (truncated?)")


def test_no_finished_stage(tmp_path, capsys):
    doc = run_doc(ladder=(1,), workloads=("chat",), flags=False)
    doc["stages"] = [{"target": "baseline", "concurrency": 1}]
    _one_line_error(*_report(capsys, write_run(tmp_path / "r", doc))[::2], "no finished stage")


def test_one_target_only(tmp_path, capsys):
    doc = run_doc(ladder=(1, 5), workloads=("chat",), flags=False)
    doc["stages"] = [s for s in doc["stages"] if s["target"] == "baseline"]
    _one_line_error(*_report(capsys, write_run(tmp_path / "r", doc))[::2], "one target only (baseline)")


def _single(tmp_path, name, target, ladder=(1, 5), workload="chat"):
    """What `loadgen run --label TARGET` writes: one target, no roles."""
    stages = [stage(target, workload, c, i) for i, c in enumerate(ladder)]
    run = {"loadgen_version": "0.1.0", "command": "run", "workload": workload, "started_unix": 1.0,
           "targets": [{"label": target, "url": "http://x", "protocol": "sglang"}]}
    return write_run(tmp_path / name, {"schema": "loadgen.run/1", "run": run, "stages": stages})


def test_combine_two_single_target_runs(tmp_path, capsys):
    a = _single(tmp_path, "a", "baseline")
    b = _single(tmp_path, "b", "spec")
    rc, out, err = _report(capsys, a, b, "--out", tmp_path / "both", "--no-png")
    assert rc == 0, err
    doc = orjson.loads((tmp_path / "both" / "run.json").read_bytes())
    assert len(doc["stages"]) == 4 and doc["run"]["combined_from"] == [str(a / "run.json"), str(b / "run.json")]
    assert "workload chat" in out
    assert "combined from" in (tmp_path / "both" / "report.html").read_text()


def test_combining_needs_out(tmp_path, capsys):
    a, b = _single(tmp_path, "a", "baseline"), _single(tmp_path, "b", "spec")
    _one_line_error(*_report(capsys, a, b)[::2], "needs --out")


def test_combining_different_ladders_or_workloads(tmp_path, capsys):
    a = _single(tmp_path, "a", "baseline", ladder=(1, 5))
    b = _single(tmp_path, "b", "spec", ladder=(1, 10))
    _one_line_error(*_report(capsys, a, b, "--out", tmp_path / "o")[::2], "ladder 1,10 differs", "1,5")
    c = _single(tmp_path, "c", "spec", workload="code")
    _one_line_error(*_report(capsys, a, c, "--out", tmp_path / "o")[::2], "workloads code differ")


def test_unnamed_targets_need_roles(tmp_path, capsys):
    a, b = _single(tmp_path, "a", "old"), _single(tmp_path, "b", "eagle")
    c = _single(tmp_path, "c", "ngram")
    _one_line_error(*_report(capsys, a, b, c, "--out", tmp_path / "o")[::2], "--baseline LABEL --spec LABEL")
    rc, out, err = _report(capsys, a, b, c, "--out", tmp_path / "o", "--baseline", "old", "--spec", "eagle",
                           "--no-html")
    assert rc == 0, err
    assert "old vs eagle" in out
    _one_line_error(*_report(capsys, a, b, "--out", tmp_path / "o", "--baseline", "old", "--spec", "nope")[::2],
                    "no stage of target nope")


def test_combine_two_crossover_runs_pools_repeated_stages(tmp_path, capsys):
    a = write_run(tmp_path / "a", run_doc(ladder=(1, 5), workloads=("chat",), seed=1, flags=False))
    b = write_run(tmp_path / "b", run_doc(ladder=(1, 5), workloads=("chat",), seed=2, flags=False))
    rc, out, err = _report(capsys, a, b, "--out", tmp_path / "ab", "--no-png")
    assert rc == 0, err
    res = orjson.loads((tmp_path / "ab" / "crossover.json").read_bytes())
    comps = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]["comparisons"]
    assert [c["n_baseline"] for c in comps] == [40, 40]  # both runs' 20 time bins per stage
    assert "EAGLE3" in (tmp_path / "ab" / "report.html").read_text()  # server metadata carried over


def test_combining_keeps_each_runs_plan_and_cut(tmp_path, capsys):
    """A baseline run that finished and a speculative one cut before C=30: the combination says C=30 is missing."""
    dirs = []
    for name, target, ladder in (("a", "baseline", (1, 5, 30)), ("b", "spec", (1, 5))):
        d = _single(tmp_path, name, target, ladder)
        doc = orjson.loads((d / "run.json").read_bytes())
        doc["run"].update(ladder=[1, 5, 30], planned_stages=[{"workload": "chat", "concurrency": c, "target": target}
                                                             for c in (1, 5, 30)],
                          cut={"by": "max-run-time", "stages_not_run": 1} if target == "spec" else None)
        write_run(d, doc)
        dirs.append(d)
    rc, out, err = _report(capsys, *dirs, "--out", tmp_path / "both", "--no-png")
    assert rc == 0, err
    res = orjson.loads((tmp_path / "both" / "crossover.json").read_bytes())
    assert res["coverage"]["chat"]["missing"] == [{"concurrency": 30, "why": "spec not run"}]
    assert "  C=30 not compared: spec not run\n  The run was cut by --max-run-time with 1 planned stage not run." in out
    assert re.search(r"^ *30 +- +- +- +- +not compared$", out, re.M), out
