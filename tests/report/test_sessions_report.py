"""The terminal's and the page's per-turn tables of a stage's sessions, from records folded by the stage: a row
per turn with the figures run.json holds; a run without sessions shows nothing of them."""

from loadgen.report.sessions import session_lines, session_table
from loadgen.stage.result import StageResult

from tests.stage.test_sessions import fold, rec


def _stage(records):
    d = fold(records).to_dict()
    return StageResult.from_dict(d).to_dict()  # what a reloaded run.json gives


def test_each_turn_is_a_row_with_the_stage_s_figures():
    d = _stage([rec(1, 1, 2, 0, ttft_ms=10, prompt=100, cached=0), rec(1, 2, 2, 100, ttft_ms=20, prompt=150, cached=120),
                rec(2, 1, 2, 50, ttft_ms=12, prompt=110), rec(2, 2, 2, 200, error="http_400")])
    lines = session_lines([d])
    assert lines[1] == ("sessions, t C=2: 2 turns planned; 2 sessions began in the window: 1 completed every turn, "
                        "1 ended on a failed turn (1 × http_400), 0 cut by the stage's end; 1.5 turns done each (mean); "
                        "a completed session took 0.13 s (p50)")  # 125 ms, HDR's 3 digits
    rows = [line.split() for line in lines[4:6]]
    # turn 1: two requests, TTFT 10 and 12 ms, prompts 100 and 110; one said it cached nothing
    # (HDR keeps 3 significant digits: 10 ms reads 10.01)
    assert rows[0] == ["1", "2", "2", "0", "10.01", "12.01", "105.0", "20.0", "0.0", "%"]
    # turn 2: one overflowed (failed), the other reused 120 of its 150 prompt tokens
    assert rows[1] == ["2", "2", "1", "1", "20.02", "20.02", "150.0", "20.0", "80.0", "%"]
    d["server"] = {"available": True, "cache_hit_rate": 0.4321}  # the server's /metrics over the window
    assert session_lines([d])[1].endswith("; the server's /metrics: 43.2 % of prompt tokens from its cache over "
                                          "the window")
    html = session_table([d])
    assert html.count("<tr>") == 1 + 2 + 1 and "80.0 %" in html and "1 × http_400" in html


def test_without_sessions_nothing_is_shown():
    d = fold([]).to_dict()
    assert "sessions" not in d
    assert session_lines([d]) == [] and session_table([d]) == ""
