"""The page's second-by-second part: a chart for every stage flagged for switching, then the adaptive
configurations' stages; none for a steady fixed configuration, nothing at all where no stage qualifies."""

from loadgen.report.speculation import stage_chart, timeline_part

from tests.stage.test_switching import _stage


def test_flagged_and_adaptive_stages_are_drawn_and_steady_ones_are_not():
    thrash = _stage(range(40), flip=True).to_dict()  # target "auto", C=40, a switch every step
    steady = _stage(range(8), flip=False).to_dict()  # target "auto", C=8
    assert thrash["speculation_timeline"]["t_s"] == [1]
    chart = stage_chart(thrash)
    assert chart.title == "auto C=40 — thrashing" and chart.note.startswith("98 switches (98/s)")
    assert [s.label for s in chart.series] == ["tokens per chunk (stream)"]  # no server: no accept length line
    html = timeline_part([thrash, steady], adaptive=[])
    assert html.count("<svg") >= 1 and "auto C=40 — thrashing" in html and "auto C=8" not in html
    # an adaptive configuration's steady stage is drawn too, after the flagged ones
    html = timeline_part([steady, thrash], adaptive=["auto"])
    assert html.index("auto C=40") < html.index("auto C=8")
    assert timeline_part([steady], adaptive=[]) == ""
