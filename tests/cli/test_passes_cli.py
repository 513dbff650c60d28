"""`loadgen crossover --passes N` against the embedded simulators: after each pass, another over exactly the load
points still open at the sequential level (analysis/sequential.py), their windows pooled; every interval at
1 − α/N; an open point's line says how much more it needs; bad combinations are one line before any load."""

import json

import pytest

from loadgen.analysis.compare import run_analysis
from loadgen.analysis.sequential import OPEN, ending, look_level
from loadgen.cli.crossover import open_points
from loadgen.settings import flags
from tests.cli.runner import in_process


@pytest.fixture(scope="module")
def passed(cli, tmp_path_factory):
    # a tie margin of 1 % keeps C=12 (Δ about -1 % near the profile's crossover) open for more than one pass
    out = tmp_path_factory.mktemp("passes") / "xo"
    p = cli("crossover", "--ladder", "4,12", "--workload", "chat", "--passes", "3", "--tie", "1%", "--duration", "1s",
            "--warmup", "0.3s", "--max-tokens", "32", "--sim-time-scale", "10", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out, p


def _settings():
    s = flags.typed_defaults("crossover")
    s.passes, s.tie = 3, 0.01
    return s


def test_each_later_pass_runs_exactly_the_points_open_before_it(passed):
    out, p = passed
    doc = json.loads((out / "run.json").read_text())
    assert doc["run"]["looks"] == 3 and doc["run"]["tie"] == pytest.approx(0.01)
    log = doc["run"].get("passes") or []
    for k in (1, 2):
        before = {**doc, "stages": [s for s in doc["stages"] if int(s.get("repeat") or 0) < k]}
        expected = open_points(before, _settings()) if k == 1 or log[k - 2:k - 1] else []
        ran = sorted({(wl, s["concurrency"]) for s in doc["stages"] if s.get("repeat") == k for wl in s["workloads"]})
        assert ran == sorted(expected), (k, ran, expected)
        assert ([tuple(x) for x in log[k - 1]["points"]] if len(log) >= k else []) == expected
        for wl, c in expected:  # both targets, once each
            assert sorted(s["target"] for s in doc["stages"] if s.get("repeat") == k and s["concurrency"] == c) \
                == ["baseline", "spec"]
    assert not any(int(s.get("repeat") or 0) > 2 for s in doc["stages"])
    if not log:
        assert "every load point decided or tied after pass 1 of at most 3" in p.stderr


def test_every_interval_is_at_the_sequential_level_and_open_points_say_what_they_need(passed):
    out, p = passed
    res = json.loads((out / "crossover.json").read_text())
    assert res["confidence"] == pytest.approx(look_level(0.90, 3)) and res["looks"] == 3
    assert res["tie_margin"] == pytest.approx(0.01)
    a = res["workloads"]["chat"]["output_tokens_per_s"]["analysis"]
    assert a["confidence"] == pytest.approx(1 - 0.1 / 3)
    assert "96.7 % intervals" in p.stdout
    doc = json.loads((out / "run.json").read_text())
    ra = run_analysis(doc, confidence=0.90)
    opened = [c.concurrency for c in ra.workloads["chat"]["output_tokens_per_s"].analysis.comparisons
              if ending(c).kind == OPEN and ending(c).more is not None]
    line = next((x for x in p.stdout.splitlines() if x.startswith("  Open after 3 passes, neither a winner nor a tie "
                                                                   "within ±1 %: ")), None)
    assert (line is not None) == bool(opened)
    if line:
        assert [int(x.split(" ")[0]) for x in line.split("C=")[1:]] == opened
    # the page says it under the comparison table, in the same words
    page = (out / "report.html").read_text()
    assert (line is not None) == ("Open after 3 passes, neither a winner nor a tie within ±1 %: " in page)


@pytest.mark.parametrize("extra, message", [
    (["--repeat", "2"], "--passes and --repeat: give one"),
    (["--rate", "1,2"], "--passes is for a ladder of concurrencies"),
    (["--sim-modes", "baseline,spec,spec-topk4"], "--passes compares two configurations, not 3"),
])
def test_a_combination_it_cannot_serve_is_one_line_before_any_load(extra, message, tmp_path):
    p = in_process("crossover", "--passes", "2", *extra, "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.strip() == f"loadgen: error: {message}" + p.stderr.strip().split(message)[1]
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag, value", [("--tie", "0"), ("--tie", "-2%"), ("--tie", "60%"), ("--tie", "abc"),
                                         ("--confidence", "1.5"), ("--confidence", "0"), ("--confidence", "x")])
def test_a_bad_tie_or_level_is_one_line_before_any_load(flag, value, tmp_path):
    # --confidence 1.5 ran every stage and then ended in a traceback (issue 43)
    p = in_process("crossover", f"{flag}={value}", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.startswith(f"loadgen: error: {flag}: ") and len(p.stderr.splitlines()) == 1
    assert not (tmp_path / "o").exists()
