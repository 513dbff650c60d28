"""phases: workloads one after another on a clock: the spec, its one-line errors, the schedule from a given clock,
and the same prompts per phase for every target whatever its timing."""

from __future__ import annotations

import itertools

import pytest

from loadgen.errors import LoadgenError
from loadgen.run.pacing import on_schedule
from loadgen.workloads import PhaseStream, PhaseWorkload, resolve
from loadgen.workloads.phases import parse
from loadgen.workloads.registry import split_mix

S = 1_000_000_000


def test_a_spec_parses_into_its_schedule() -> None:
    sched = parse("phases:predictable@30s,freetext@2m,chat@500ms,code@1.5")
    assert [(p.name, p.duration_s) for p in sched.phases] == [
        ("predictable", 30.0), ("freetext", 120.0), ("chat", 0.5), ("code", 1.5)]
    assert sched.cycle_s == 152.0
    # a phase may be a weighted mix: its commas run to the piece that carries @DUR
    mixed = parse("phases:chat:1,code:1@10s,freetext@10s")
    assert [p.name for p in mixed.phases] == ["chat:1,code:1", "freetext"]
    w = resolve("phases:predictable@8s,freetext@8s")
    assert isinstance(w, PhaseWorkload) and w.name == "phases:predictable@8s,freetext@8s"
    assert split_mix("phases:predictable@8s,freetext@8s") is None  # one spec, not a mix of two


@pytest.mark.parametrize("spec, words", [
    ("phases:predictable@8s,nope@8s", "unknown workload 'nope'"),
    ("phases:predictable@8s,freetext@0s", "phase 'freetext@0s' has zero length"),
    ("phases:predictable@0,freetext@8s", "phase 'predictable@0' has zero length"),
    ("phases:chat@8s,phases:code@8s", "a phase cannot be another phases: workload"),
    ("phases:chat@8s,code", "phase 'code' has no duration"),
    ("phases:chat@soon", "'soon' is not a duration"),
    ("phases:", "no phases"),
    ("phases:@8s", "names no workload"),
])
def test_bad_specs_are_one_line_errors_naming_the_spec(spec, words) -> None:
    with pytest.raises(LoadgenError) as info:
        resolve(spec)
    text = str(info.value)
    assert "\n" not in text and words in text and repr(spec) in text, text


def test_the_phase_follows_the_clock_from_the_anchor() -> None:
    now = [0]
    stream = PhaseStream(parse("phases:predictable@8s,freetext@4s,chat@4s"),
                         {n: resolve(n).requests(0) for n in ("predictable", "freetext", "chat")},
                         clock=lambda: now[0])

    def draw(t_s: float) -> tuple[str, int]:
        now[0] = int(t_s * S)
        r = next(stream)
        return r.workload, r.phase

    # before the window opens: phase 0, however long the warm-up
    assert draw(0) == draw(100) == ("predictable", 0)
    stream.anchor(100 * S)
    got = [draw(100 + t) for t in (0, 7.999, 8, 11.9, 12, 15.99, 16, 24, 28, 33)]
    assert got == [("predictable", 0), ("predictable", 0), ("freetext", 1), ("freetext", 1), ("chat", 2),
                   ("chat", 2), ("predictable", 0), ("freetext", 1), ("chat", 2), ("predictable", 0)]
    assert stream.schedule.intervals(20) == [(0, 8, 0), (8, 12, 1), (12, 16, 2), (16, 24, 0)]


def test_every_target_gets_the_same_prompts_in_each_phase() -> None:
    """Two targets of different speed draw different numbers of requests per phase; each phase's requests are the
    same ones in the same order, those the phase's workload alone sends with that seed."""
    w = resolve("phases:predictable@8s,freetext@8s")

    def run(every_s: float, n: int) -> dict[str, list]:
        now = [0]
        stream = w.requests(7)
        stream.clock = lambda: now[0]
        stream.anchor(0)
        got: dict[str, list] = {}
        for k in range(n):
            now[0] = int(k * every_s * S)
            r = next(stream)
            got.setdefault(r.workload, []).append(r.prompt or r.messages)
        return got

    fast, slow = run(0.05, 700), run(0.3, 120)
    for name in ("predictable", "freetext"):
        k = min(len(fast[name]), len(slow[name]))
        assert k > 30 and fast[name][:k] == slow[name][:k]
        alone = [r.prompt or r.messages for r in itertools.islice(resolve(name).requests(7), k)]
        assert fast[name][:k] == alone


def test_an_open_loop_request_takes_the_phase_of_its_planned_instant() -> None:
    """The dispatcher draws a request up to an inter-arrival before its instant: the phase is the instant's."""
    stream = resolve("phases:predictable@1s,freetext@1s").requests(0)
    t0 = 50 * S
    stream.anchor(t0 + 2 * S)  # the window opens 2 s into the stage
    stream.clock = lambda: 0  # a draw-time phase would be the anchor's phase 0 throughout
    offsets = [0.5, 2.2, 2.999, 3.0, 3.5, 4.1, 5.2]
    pairs = list(on_schedule(iter(offsets), stream, lambda: t0))
    assert [o for o, _ in pairs] == offsets
    assert [r.phase for _, r in pairs] == [0, 0, 0, 1, 1, 0, 1]
    assert [r.workload for _, r in pairs][3] == "freetext"
