"""A stage's per-turn and per-session figures from given records: counts, sums, merge and reload, exact."""

from array import array

import pytest

from loadgen.record import CANCELLED, RequestRecord
from loadgen.request import Turn
from loadgen.stage.result import StageAccumulator, StageResult

MS = 1_000_000
WS, WE = 1000 * MS, 2000 * MS


def rec(session, index, of, start_ms, ttft_ms=10, prompt=100, out=20, cached=None, error=None):
    r = RequestRecord("t", "w", f"{session}-{index}", WS + start_ms * MS, turn=Turn(session, index, of))
    r.sent_ns = r.start_ns
    r.chunk_ns = array("q", [r.start_ns + ttft_ms * MS, r.start_ns + (ttft_ms + 5) * MS])
    r.chunk_tokens = array("l", [1, out - 1])
    r.end_ns = r.chunk_ns[-1]
    r.prompt_tokens, r.output_tokens, r.cached_tokens = prompt, out, cached
    if error is not None:
        r.fail(error, "the input is longer than the model's context length" if error == "http_400" else "stop")
    return r


def fold(records, lo=WS, hi=WE):
    acc = StageAccumulator(lo, hi, 100 * MS)
    for r in records:
        acc.add(r)
    return acc.result(target="t", url="u", protocol="chat", concurrency=2)


def test_turns_and_sessions_are_counted_as_they_went():
    records = [
        # session 1: all three turns, from 0 ms to the last turn's end at 300 + 15 ms
        rec(1, 1, 3, 0, ttft_ms=10, prompt=100, cached=0), rec(1, 2, 3, 100, ttft_ms=20, prompt=150, cached=100),
        rec(1, 3, 3, 300, ttft_ms=30, prompt=200, cached=150),
        # session 2: its second turn overflowed the context
        rec(2, 1, 3, 50, ttft_ms=12, prompt=110, cached=0), rec(2, 2, 3, 200, error="http_400"),
        # session 3: began before the window (its turns inside count per turn, not as a session)
        rec(3, 2, 3, -50, prompt=160), rec(3, 3, 3, 400, prompt=220),
        # session 4: cut by the stage's end in its second turn; session 5: one turn done, then the stage ended
        rec(4, 1, 3, 500), rec(4, 2, 3, 900, error=CANCELLED), rec(5, 1, 3, 950),
    ]
    s = fold(records).sessions
    assert [(t.started, t.completed, t.failed) for t in s.turns] == [(4, 4, 0), (3, 1, 1), (2, 2, 0)]
    assert [t.prompt_tokens for t in s.turns] == [100 + 110 + 100 + 100, 150, 200 + 220]
    assert (s.started, s.completed, s.failed, s.cut) == (4, 1, 1, 2)
    assert s.ended_by == {"http_400": 1}
    assert s.turns_done == 3 + 1 + 1 + 1
    assert s.duration.count == 1 and abs(s.duration.percentile(50) - 335_000) <= 335  # µs, 3 digits
    d = s.to_dict()
    # HDR keeps 3 significant digits; turn 3's two TTFTs are 30 and 10 ms
    assert [t["ttft_p50_ms"] for t in d["per_turn"]] == pytest.approx([10.0, 20.0, 10.0], rel=1e-3)
    # the rate over the requests whose server said what it cached: session 3's turn 3 said nothing
    assert [t["cache_hit_rate"] for t in d["per_turn"]] == [0.0, round(100 / 150, 4), round(150 / 200, 4)]
    assert [t["prompt_tokens_mean"] for t in d["per_turn"]] == [102.5, 150.0, 210.0]
    assert d["sessions"]["turns_per_session"] == 1.5


def test_two_processes_merge_to_the_figures_of_one_and_a_reload_reads_them_back():
    a = [rec(1, 1, 2, 0), rec(1, 2, 2, 100, prompt=140)]
    b = [rec(1, 1, 2, 10, prompt=90), rec(1, 2, 2, 120, error="http_400")]
    one = fold(a + [rec(9, 1, 2, 10, prompt=90), rec(9, 2, 2, 120, error="http_400")])
    merged = fold(a)
    merged.merge(fold(b))
    assert merged.sessions.to_dict() == one.sessions.to_dict()
    back = StageResult.from_dict(merged.to_dict())
    assert back.sessions.to_dict() == one.sessions.to_dict()
    assert merged.to_dict()["sessions"]["sessions"]["ended_by"] == {"http_400": 1}


def test_a_stage_without_sessions_has_no_sessions_block():
    r = RequestRecord("t", "w", "r", WS + MS)
    r.fail("http_500", "x")
    assert "sessions" not in fold([r]).to_dict()
