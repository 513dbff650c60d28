"""The one stage order: ``loadgen run``'s ramp and the Locust conductor take the same stages in the same order."""

import pytest

from loadgen.client.target import Target
from loadgen.run.order import Durations, Schedule, fixed_spec, prompt_seed, stage_order
from loadgen.run.ramp import RampPlan
from loadgen.run.spec import RunOptions


def _targets():
    return [Target("base", "http://a:1"), Target("spec", "http://b:2")]


def test_targets_alternate_at_each_concurrency_and_workload():
    a, b = _targets()
    slots = stage_order([a, b], [1, 4], ["chat", "code"])
    assert [(s.workload, s.value, s.target.label) for s in slots] == [
        ("chat", 1, "base"), ("chat", 1, "spec"), ("chat", 4, "base"), ("chat", 4, "spec"),
        ("code", 1, "base"), ("code", 1, "spec"), ("code", 4, "base"), ("code", 4, "spec")]
    assert [s.index for s in slots] == list(range(8))
    assert [s.step for s in slots] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_one_server_at_a_time_then_the_extra_stages_for_every_target():
    a, b = _targets()
    slots = stage_order([a, b], [1, 4], ["chat"], by_target=True, extra=[("chat", 2)])
    assert [(s.value, s.target.label) for s in slots] == [
        (1, "base"), (4, "base"), (1, "spec"), (4, "spec"), (2, "base"), (2, "spec")]
    assert [s.step for s in slots][-2:] == [2, 2]


def test_repeats_run_the_whole_ladder_pass_after_pass_each_with_its_own_prompts():
    a, b = _targets()
    slots = stage_order([a, b], [1, 4], ["chat", "code"], repeats=2, extra=[("chat", 2)])
    assert [(s.workload, s.value, s.target.label, s.repeat) for s in slots] == [
        ("chat", 1, "base", 0), ("chat", 1, "spec", 0), ("chat", 4, "base", 0), ("chat", 4, "spec", 0),
        ("chat", 1, "base", 1), ("chat", 1, "spec", 1), ("chat", 4, "base", 1), ("chat", 4, "spec", 1),
        ("code", 1, "base", 0), ("code", 1, "spec", 0), ("code", 4, "base", 0), ("code", 4, "spec", 0),
        ("code", 1, "base", 1), ("code", 1, "spec", 1), ("code", 4, "base", 1), ("code", 4, "spec", 1),
        ("chat", 2, "base", 0), ("chat", 2, "spec", 0)]
    assert [s.step for s in slots][:8] == [0, 0, 1, 1, 0, 0, 1, 1]
    seeds = [prompt_seed(s.step, s.repeat) for s in slots]
    assert seeds[:8] == [0, 0, 1, 1, 10_000, 10_000, 10_001, 10_001]  # every target in a pass the same; passes apart
    assert seeds[-2:] == [2, 2]  # the refinement round's step, once
    assert [s.index for s in slots] == list(range(18))
    by = stage_order([a, b], [1, 4], ["chat"], repeats=3, by_target=True)
    assert [(s.target.label, s.value, s.repeat) for s in by][:6] == [
        ("base", 1, 0), ("base", 4, 0), ("base", 1, 1), ("base", 4, 1), ("base", 1, 2), ("base", 4, 2)]
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        stage_order([a, b], [1], ["chat"], repeats=0)


def test_the_ramp_plan_takes_its_stages_from_the_one_order():
    targets = _targets()
    plan = RampPlan(targets=targets, ladder=[1, 2], workloads=["chat"], make_source=lambda w: None,
                    opts=RunOptions())
    assert plan.stages() == [(s.workload, s.value, s.target) for s in stage_order(targets, [1, 2], ["chat"])]


def test_a_fixed_warmup_is_min_and_cap_at_once():
    spec = fixed_spec(8, 3.0, duration_s=10.0, bin_s=0.5, max_cooldown_s=60.0)
    assert (spec.warmup_s, spec.max_warmup_s, spec.ramp_s, spec.max_stage_s) == (3.0, None, 0.0, None)
    assert (spec.duration_s, spec.bin_width_s, spec.max_cooldown_s) == (10.0, 0.5, 60.0)


def test_the_run_budget_is_shared_by_estimate_and_refused_when_spent():
    a, b = _targets()
    durations = Durations()
    durations.add("base", "chat", 1, 2.0)
    durations.add("spec", "chat", 1, 2.0)
    sched = Schedule(stage_order([a, b], [1, 4], ["chat"]), durations, 2.0, duration_s=10.0)
    budget, by = sched.budget(0, 100.0)
    assert by == "max-run-time" and 3.0 <= budget < 50.0  # the first of four stages, the smallest
    assert sched.budget(0, None) == (None, "max-stage-time")
    assert sched.budget(0, 2.5) is None  # less than the minimum warm-up and a second of window


def test_the_likely_request_runs_on_the_line_through_the_two_stages_below():
    """A request's likely duration at C: the line through the two nearest lower stages (a decode step that grows
    with the batch), between the nearest one's duration (a server that keeps up) and Little's law's scaling (a
    saturated one); the README's chat baseline at C=1, 5 gave 0.913 s at C=10 (measured 0.905, scaled 1.32)."""
    from loadgen.run.order import e2e_likely

    chat = {1: 0.454, 5: 0.658}
    assert e2e_likely(chat, 10) == pytest.approx(0.913)
    assert e2e_likely({1: 0.454}, 10) == 0.454  # one stage below: its duration as it was
    assert e2e_likely({1: 0.9, 5: 0.8}, 10) == 0.8  # shorter with load (noise): never below the nearest
    assert e2e_likely({1: 0.1, 5: 1.0}, 10) == pytest.approx(2.0)  # never beyond the scaling
    assert e2e_likely({10: 1.0, 20: 2.0}, 20) == 2.0 and e2e_likely({10: 1.0}, 5) == 1.0
    durations = Durations()
    durations.add("base", "chat", 1, 0.454)
    durations.add("base", "chat", 5, 0.658)
    assert durations.likely("base", "chat", 10) == pytest.approx(0.913)
    assert durations.likely("spec", "chat", 10) == pytest.approx(0.913)  # another target's, with none of its own
    assert durations.likely("spec", "code", 10) is None


def test_three_or_more_targets_rotate_in_a_williams_design():
    """At each concurrency every target once; over a full cycle of rows each target runs in each position,
    and right after each other target, equally often (two targets keep A, B at every step)."""
    from collections import Counter

    from loadgen.run.order import rotation

    assert rotation(2) == [[0, 1]]
    for n in (3, 4, 5, 6):
        rows = rotation(n)
        assert len(rows) == (n if n % 2 == 0 else 2 * n)
        assert all(sorted(r) == list(range(n)) for r in rows)
        positions = Counter((r[i], i) for r in rows for i in range(n))
        follows = Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
        assert len(set(positions.values())) == 1 and len(positions) == n * n
        assert len(set(follows.values())) == 1 and len(follows) == n * (n - 1)
    slots = stage_order(["a", "b", "c"], [1, 2, 3], ["chat"])
    steps = [[s.target for s in slots if s.step == k] for k in range(3)]
    assert steps == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert [s.target for s in stage_order(["a", "b", "c"], [1, 2], ["chat"], by_target=True)] == \
        ["a", "a", "b", "b", "c", "c"]  # one server at a time when loadgen starts them


def test_a_share_that_cannot_buy_a_steady_window_is_not_run_unless_a_partner_ran():
    """Issue 27: where --max-run-time cannot buy a steady window the ladder says so and spends the time elsewhere,
    rather than measuring an unsteady stage that is then not compared. Requests of 2 s at C=1: a steady window
    at C=64 takes at least the users' ramp (2 s, a server that keeps up), 2 s to settle, the window's opening,
    10 s of window and its closing scrape."""
    a, b = _targets()
    durations = Durations()
    durations.add("base", "chat", 1, 2.0)
    durations.add("spec", "chat", 1, 2.0)
    sched = Schedule(stage_order([a, b], [1, 64], ["chat"]), durations, 2.0, duration_s=10.0)
    assert sched.need_s(2) == pytest.approx(2.0 + 2.0 + 0.5 + 10.0 + 1.0)
    assert sched.unaffordable(2, 15.0, "max-run-time") == ("the run's budget leaves 15 s for it, a steady window "
                                                          "takes about 16 s (--max-run-time)")
    assert sched.unaffordable(2, 16.0, "max-run-time") == ""
    assert sched.unaffordable(2, 15.0, "max-stage-time") == ""  # the user's own stage limit: run, and cut
    assert sched.unaffordable(3, 1.0, "max-run-time") == ""  # the base ran C=64 already: skipping wastes it
    budget, by = sched.budget(2, 20.0)  # the two C=64 stages share 20 s
    assert by == "max-run-time" and budget < 16.0 and sched.unaffordable(2, budget, by)
