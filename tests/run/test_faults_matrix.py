"""The fault matrix (``loadgen bench faults``) in short: one real stage per fault class, one mixed, one whose
server exits and one whose server hangs, each against a simulator injecting it. Every injected fault is
counted under its own class (or was cancelled with the stage's end, started after its window), none is
lost, and the stage is kept with its failures."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from loadgen.bench import faults_bench
from loadgen.sim.faults import KINDS

ARGS = SimpleNamespace(concurrency=4, duration=1.0, warmup=0.3, time_scale=5.0, read_timeout=0.5, seed=0)
STALL = 1.0
"""stall and slow_headers last longer than the read timeout: each is a timeout."""


@pytest.fixture(scope="module")
def src():
    return faults_bench.source("uniform:16,32")


@pytest.fixture(scope="module")
def rows() -> dict:
    """The stages run so far, by fault spec: the table's test prints one of the per-class stages again."""
    return {}


def _run(rows: dict, kind: str, spec: str, src) -> dict:
    if spec not in rows:
        rows[spec] = faults_bench.run_one(kind, spec, ARGS, src)
    return rows[spec]


def _check(row: dict, kinds: set[str]) -> None:
    assert row["lost"] == 0, row
    assert row["kept"], row
    assert set(row["faults"]) <= kinds, row["faults"]
    for kind, f in row["faults"].items():
        assert f["injected"] > 0
        assert f["counted"] + f["after_window"] == f["injected"], (kind, f)
        assert not f["as"], (kind, f)  # nothing counted under another class, nothing as a success
    classes = {c for k in row["faults"] for c in faults_bench.EXPECTED[k]}
    assert set(row["window"]["failures"]) <= classes | {"connect"}, row["window"]["failures"]
    assert row["window"]["failed"] == sum(f["count"] for f in row["window"]["failures"].values())
    assert not row["healthy_failed"], row["healthy_failed"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_class_is_counted_under_its_own_class_and_none_is_lost(live, kind, src, rows):
    row = _run(rows, kind, faults_bench._kind_spec(kind, 0.3, STALL), src)
    _check(row, {kind})
    assert row["faults"][kind]["counted"] >= 1, row["faults"]  # seen in the window, under its own class
    assert not row["unseen_by_sim"]


def test_mixed_faults(live, src):
    spec = ",".join(faults_bench._kind_spec(k, 0.08, STALL) for k in KINDS)
    row = faults_bench.run_one("mixed", spec, ARGS, src)
    _check(row, set(KINDS))
    assert len(row["faults"]) >= 6, row["faults"]


def test_a_server_that_exits_mid_stage(live, src):
    row = faults_bench.run_one("die_after", "die_after=25", ARGS, src)
    _check(row, {"die"})
    assert row["sim_exit"] == 3
    assert row["faults"]["die"]["counted"] >= 1  # the streams cut by the exit
    assert {k.split()[0] for k in row["unseen_by_sim"]} == {"connect"}  # after it, nothing listens


def test_a_server_that_stops_answering(live, src):
    row = faults_bench.run_one("hang_after", "hang_after=25", ARGS, src)
    _check(row, {"hang"})
    assert row["faults"]["hang"]["counted"] >= ARGS.concurrency


def test_the_table_prints(live, src, rows, capsys):
    row = _run(rows, "http503", "http503=0.3", src)
    # the same stage stands in for the fault-free pair: only the printing is checked here
    rows = [dict(row, stage="none (A)", spec="", faults={}), dict(row, stage="none (A')", spec="", faults={}), row]
    faults_bench.print_table(rows)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("http503"))
    assert "http_503" in line and " yes " in line
    assert "the simulator received" in out and "first message per class" in out
