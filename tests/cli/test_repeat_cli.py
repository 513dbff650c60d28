"""`loadgen crossover --repeat N` against the embedded simulators: every stage run N times, pass after pass,
each pass in run.json, each stage's spread across the passes in crossover.json, the terminal and the page."""

import json

import pytest

from loadgen.analysis.coverage import why_unusable
from tests.cli.runner import in_process


@pytest.fixture(scope="module")
def repeated(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "xo"
    p = cli("crossover", "--ladder", "1,4", "--workload", "chat", "--repeat", "3", "--duration", "1s",
            "--warmup", "0.3s", "--max-tokens", "32", "--sim-time-scale", "10", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out, p


def test_every_stage_runs_once_a_pass_in_the_one_order(repeated):
    out, p = repeated
    doc = json.loads((out / "run.json").read_text())
    ran = [(s["target"], s["concurrency"], s["repeat"]) for s in doc["stages"]]
    assert ran == [(t, c, r) for r in range(3) for c in (1, 4) for t in ("baseline", "spec")]
    assert [(x["target"], x["concurrency"], x["repeat"]) for x in doc["run"]["planned_stages"]] == ran
    assert "[1/12] baseline C=1 workload=chat pass 1/3" in p.stderr
    assert "[12/12] spec C=4 workload=chat pass 3/3" in p.stderr


def test_each_stage_has_its_spread_across_the_passes(repeated):
    out, p = repeated
    doc = json.loads((out / "run.json").read_text())
    res = json.loads((out / "crossover.json").read_text())
    m = res["workloads"]["chat"]["output_tokens_per_s"]
    passes = m["passes"]
    assert passes["passes"] == 3
    for t in ("baseline", "spec"):
        for c in (1, 4):
            # a pass's figure of every stage the analysis compares, in pass order: on a busy host a C=4 stage's
            # server ran a median of 2 requests (the user between its 32-token requests), and a stage's
            # simulator fell behind its model: neither is compared
            kept = [st["output_tokens_per_s"] for st in doc["stages"]
                    if (st["target"], st["concurrency"]) == (t, c) and not why_unusable(st)]
            s = passes["by_target"][t].get(str(c))
            if len(kept) < 2:
                assert s is None, s
                continue
            assert s["values"] == pytest.approx(kept) and s["cv"] is not None and s["cv"] >= 0, (s, kept)
    # the pooled comparison rests on every pass's windows
    bins = {(s["target"], s["concurrency"]): 0 for s in doc["stages"]}
    for s in doc["stages"]:
        bins[(s["target"], s["concurrency"])] += len(s["workloads"]["chat"]["timeline"]["tokens"])
    comps = {c["concurrency"]: c for c in m["analysis"]["comparisons"]}
    assert comps[1]["n_baseline"] <= bins[("baseline", 1)] and comps[1]["n_baseline"] > bins[("baseline", 1)] / 3
    # each pass's own Δ where both targets' stages of that pass are compared (a cold suite's C=1 pass had a
    # simulator fell behind its model: two deltas there, not three)
    usable = {(st["target"], st["concurrency"], st["repeat"]) for st in doc["stages"] if not why_unusable(st)}
    for c in (1, 4):
        both = [r for r in range(3) if ("baseline", c, r) in usable and ("spec", c, r) in usable]
        d = passes["deltas"].get(str(c))
        assert (d is None) if len(both) < 2 else len(d["deltas"]) == len(both), (c, both, d)
    assert "across 3 passes: output throughput's CV per stage" in p.stdout
    assert "Across the 3 passes</h4>" in (out / "report.html").read_text()


def test_from_reads_the_passes_again(cli, repeated, tmp_path):
    out, _ = repeated
    again = cli("crossover", "--from", str(out / "run.json"), "--out", str(tmp_path / "again"), "--no-report")
    assert again.returncode == 0, again.stderr
    first = json.loads((out / "crossover.json").read_text())["workloads"]["chat"]["output_tokens_per_s"]["passes"]
    second = json.loads((tmp_path / "again" / "crossover.json").read_text())
    assert second["workloads"]["chat"]["output_tokens_per_s"]["passes"] == first
    assert "across 3 passes" in again.stdout


@pytest.mark.parametrize("value, said", [("0", "--repeat: must be >= 1, got 0"),
                                         ("two", "--repeat: 'two' is not a whole number")])
def test_a_bad_repeat_is_one_line(value, said, tmp_path):
    p = in_process("crossover", "--repeat", value, "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr


def test_an_open_loop_ladder_takes_no_repeats(tmp_path):
    """The rate analysis reads one stage per target and rate: a second pass would be measured and not read."""
    p = in_process("crossover", "--rate", "1,2", "--repeat", "2", "--out", str(tmp_path / "o"))
    assert p.returncode != 0 and "--repeat is for a ladder of concurrencies" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "o").exists()
