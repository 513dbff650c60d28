"""A configuration that switches speculation by load, against the embedded simulators: the stream tells when a
naive threshold thrashes (stage/switching.py), and a fixed configuration, or one away from its threshold, is not
flagged."""

import json

import pytest

from loadgen.analysis.coverage import why_unusable
from loadgen.stage.switching import NOTE_HEAD


@pytest.fixture(scope="module")
def thresholds(cli, tmp_path_factory):
    # spec-adaptive turns speculation off at a running batch of 48: a closed loop of 48 users holds the batch at
    # 47-48 as requests end and the next are sent, so a threshold read anew every step flips step after step
    out = tmp_path_factory.mktemp("sw") / "xo"
    p = cli("crossover", "--sim-modes", "spec,spec-adaptive", "--ladder", "40,48", "--workload", "predictable",
            "--duration", "2s", "--warmup", "0.5s", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr
    return {(s["target"], s["concurrency"]): s for s in json.loads((out / "run.json").read_text())["stages"]}, p


def test_a_naive_threshold_at_its_batch_is_flagged_as_thrashing(thresholds):
    stages, p = thresholds
    sw = stages[("spec-adaptive", 48)]["switching"]
    assert sw["oscillating"] and sw["switches"] >= 4 and sw["on"] and sw["off"]
    notes = [n for n in stages[("spec-adaptive", 48)]["notes"] if n.startswith(NOTE_HEAD)]
    assert notes == [f"{NOTE_HEAD} {sw['switches']} times" + notes[0].split(" times", 1)[1]]
    if why_unusable(stages[("spec-adaptive", 48)]):
        # a busy host's server ran fewer than 48 at once (a cold suite: a median of 40): the stage is not compared,
        # and the terminal says why in its table's lines, not among the compared stages' flags
        assert "C=48 not compared: spec-adaptive not comparable" in p.stdout
        return
    flags = p.stdout.split("\nflags:\n", 1)[1]  # the terminal's flags, the stage's own block
    assert notes[0] in flags.split("spec-adaptive C=48 (predictable): ", 1)[1]


def test_fixed_speculation_and_a_batch_below_the_threshold_are_not(thresholds):
    stages, _ = thresholds
    for key in (("spec", 40), ("spec", 48), ("spec-adaptive", 40)):
        sw = stages[key]["switching"]
        assert sw["switches"] == 0 and sw["off"] == 0 and not sw["oscillating"], key
        assert not any(n.startswith(NOTE_HEAD) for n in stages[key]["notes"]), key
