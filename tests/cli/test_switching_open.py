"""Under bursty open-loop traffic around their threshold, the naive adaptive mode and its hysteresis twin are each
flagged by what the stream saw, and never where the simulator's truth says they could not have thrashed: each stage's ``simulator.switching`` (its true
switches inside the window, loadgen.serverview.simclock) beside the stream's own ``switching``
(loadgen.stage.switching). How many switches each makes is the host's and the burst schedule's (the naive mode
7 busy, 10-11 pinned; the hysteresis mode 1): a figure of ``loadgen bench switching``, not asserted here."""

import json

import pytest

from loadgen.stage.switching import NOTE_HEAD, thrashing

NAIVE, BAND = "spec-adaptive", "spec-adaptive-hysteresis"
RATE = 46.0
# Gamma arrivals at CV 3 around 46 req/s of predictable text hold the running batch near 48 in bursts: the naive
# mode (off at 48, on below 48) switched 7 times in the 5 s window unpinned, as this test runs (stream 6, three
# runs alike), 10-11 pinned to one core (taskset; stream 10-11); the band mode (on again only below 32) once,
# off through most of the window (the stream saw too few drafts to judge). The count is a property of the burst
# schedule (seeded, the same every run at a rate): at 40 req/s the naive mode read 5 switches in 5 s, on the
# threshold, at 44 and 50 req/s once (a burst carries the batch past 48 and speculation off, and the slower plain
# steps hold it there); so the test keeps the rate at which, on an ordinary host, one stage thrashes and the other
# does not, and both sides of the "if and only if" are read. About 29 s wall.


@pytest.fixture(scope="module")
def bursty(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("swo") / "xo"
    p = cli("crossover", "--sim-modes", f"{NAIVE},{BAND}", "--rate", f"{RATE:g}", "--arrival", "gamma:3",
            "--workload", "predictable", "--duration", "5s", "--warmup", "1s", "--out", str(out), "--no-report")
    assert p.returncode == 0, p.stderr[-3000:]
    stages = json.loads((out / "run.json").read_text())["stages"]
    assert sorted((s["target"], s["rate"]) for s in stages) == [(NAIVE, RATE), (BAND, RATE)]
    return {s["target"]: s for s in stages}


def _flagged(stage: dict) -> bool:
    return any(n.startswith(NOTE_HEAD) for n in stage["notes"])


def test_a_stage_is_flagged_by_its_streams_count_and_never_beyond_the_simulators_truth(bursty):
    """What holds whatever the host: the flag is the stream's own count under the one rule, that count never
    exceeds the truth's by more than one, so a stage whose truth could not thrash (the band mode's) is never
    flagged. That a truly thrashing stage is flagged is not exact: on a cold venv's host the naive mode
    switched 13 times in 5 s and its stream showed too few of them to pass the rule (a switch faster than a
    cell is lost): how often the stream finds the truth's thrashing is ``loadgen bench switching``'s figure."""
    for label, s in bursty.items():
        truth, window_s = s["simulator"]["switching"], s["window"]["duration_s"]
        assert truth["per_s"] == round(truth["switches"] / window_s, 4), label
        seen = s.get("switching", {}).get("switches", 0)
        assert _flagged(s) == thrashing(seen, window_s), (label, truth, s.get("switching"))
        # The stream can miss a switch, never make one: a cell is judged off only when none of its chunks carried
        # drafts (by chance at ALPHA over the window while speculating), on only when half its level did, so
        # its judged states are, in time order, states of the forwards whose chunks fell in the window; a
        # switch faster than a cell reads as a mixed cell and is lost. Those forwards ended up to the
        # delivery delay before the window (the client's kernel stamps; under a millisecond on loopback, less
        # than one 4 ms forward at time-scale 5): the last one before a switch just ahead of the window's
        # start can show the old state inside it, a switch the truth's window leaves out: at most one more.
        # (A band-mode stage that stayed off shows no speculation to the stream: no count, 0 here.)
        assert seen <= truth["switches"] + 1, (label, truth, s.get("switching"))
        if not thrashing(truth["switches"] + 1, window_s):
            assert not _flagged(s), (label, truth, s.get("switching"))
