"""An adaptive mode's speculation state, step by step: the scheduler driven without a clock through its decode
path (next_forward, complete_forward) over running batches we choose; the switches it logs, and the route that
reads them (SwitchLog.query, ``/loadgen/truth?switches=1``)."""

import random

import pytest

from loadgen.sim import profiles
from loadgen.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from loadgen.sim.truth import SpecSwitch, SwitchLog, TruthRecord
from tests.sim.helpers import get

PROFILE = "pcie-8gpu-eagle3"
# the batch walks up through 48, hovers across it, sinks to 32 and below, then climbs back
WALK = [40, 47, 48, 47, 48, 49, 47, 40, 33, 32, 31, 32, 40, 47, 48, 47, 31, 30]


def _request(i: int) -> SimRequest:
    truth = TruthRecord(rid=str(i), route="test", stream=True, mode="m", received_ns=0, prompt_tokens=8,
                        prompt_kind="test", accept_p=0.9)
    # never finishes on its own within the walk: the batch is what the test sets
    return SimRequest(rid=str(i), prompt_tokens=8, target_tokens=1 << 30, finish_type="length", accept_p=0.9,
                      rng=random.Random(i), truth=truth, record=False, histogram=[0] * 8)


def _walk(mode: str, batches: list[int]) -> tuple[Scheduler, list[bool]]:
    """Decode steps over ``batches`` in order (t_ns = 1000 * step index): the scheduler and each step's state."""
    sched = Scheduler(SchedulerConfig(profiles.load(PROFILE), mode), on_finish=lambda req: None)
    pool = [_request(i) for i in range(max(batches))]
    states = []
    for k, batch in enumerate(batches):
        sched.running = pool[:batch]
        admitted, _ = sched.next_forward()
        assert admitted == []  # nothing waits: a decode step
        sched.complete_forward(admitted, 1000 * k)
        states.append(sched.spec_on)
    return sched, states


def _expected(batches: list[int], off: int, on_below: int) -> list[bool]:
    state, out = True, []
    for b in batches:
        state = b < off if state else b < on_below
        out.append(state)
    return out


def test_the_band_mode_switches_off_at_48_and_on_only_below_32():
    sched, states = _walk("spec-adaptive-hysteresis", WALK)
    assert states == _expected(WALK, 48, 32)
    # off at the first 48 (step 2), on again at the first 31 (step 10), off at the next 48 (14), on at 31 (16):
    # the hovering across 48 in between changes nothing
    assert sched.switches.between() == [SpecSwitch(2000, False, 48), SpecSwitch(10000, True, 31),
                                        SpecSwitch(14000, False, 48), SpecSwitch(16000, True, 31)]
    assert sched.switches.total == 4


def test_the_naive_mode_switches_at_every_crossing_of_48():
    sched, states = _walk("spec-adaptive", WALK)
    assert states == [b < 48 for b in WALK]
    crossings = [k for k in range(1, len(WALK)) if (WALK[k] < 48) != (WALK[k - 1] < 48)]
    assert [s.t_ns // 1000 for s in sched.switches.between()] == crossings == [2, 3, 4, 6, 14, 15]
    assert [(s.on, s.batch) for s in sched.switches.between()] == [
        (False, 48), (True, 47), (False, 48), (True, 47), (False, 48), (True, 47)]


@pytest.mark.parametrize("mode", ["spec", "baseline"])
def test_a_mode_that_does_not_adapt_never_switches(mode):
    sched, states = _walk(mode, WALK)
    assert states == [mode == "spec"] * len(WALK) and sched.switches.total == 0
    assert sched.switches.query() == {"total": 0, "complete": True, "switches": []}


def test_a_switch_step_costs_the_switch_time_once():
    prof = profiles.load(PROFILE)
    sched, _ = _walk("spec-adaptive", [47, 47])
    sched.running = sched.running[:1] * 48
    _, switching_ms = sched.next_forward()
    sched.complete_forward([], 10_000)
    _, steady_ms = sched.next_forward()
    assert switching_ms - steady_ms == pytest.approx(prof.for_mode("spec-adaptive").spec.adaptive_switch_ms)


def test_the_query_reads_a_window_and_says_when_part_of_it_was_dropped():
    log = SwitchLog(limit=3)
    for k in range(5):
        log.add(SpecSwitch(100 * k, k % 2 == 1, 48))
    # kept: t = 200, 300, 400; the ones at 0 and 100 dropped
    assert log.query(250, 400) == {"total": 5, "complete": True, "switches": [[300, True, 48]]}
    assert log.query(150) == {"total": 5, "complete": False, "switches": [[200, False, 48], [300, True, 48],
                                                                          [400, False, 48]]}
    assert SwitchLog().query(0) == {"total": 0, "complete": True, "switches": []}


def test_the_truth_route_answers_switches_for_a_window(spec_sim):
    # a mode that does not adapt: none, whatever the window
    assert get(spec_sim.url, "/loadgen/truth?switches=1").json() == {"total": 0, "complete": True, "switches": []}
    assert get(spec_sim.url, "/loadgen/truth?switches=1&since_ns=5&until_ns=9").json()["switches"] == []
    assert get(spec_sim.url, "/loadgen/truth?switches=1&since_ns=soon").status == 400
