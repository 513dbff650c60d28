"""A ladder value says what it is (stage/load.py): its words, its run.json key, and entries of either form read."""

import pytest

from loadgen.stage.load import LoadPoint, planned_value


@pytest.mark.parametrize("axis, value, words", [
    ("concurrency", 10, "C=10"), ("rate", 2.5, "rate=2.5/s"), ("rate", 6.4812, "rate=6.48/s"),
    ("trace_speed", 2.0, "trace x2"),
])
def test_a_load_point_is_said_and_written_as_what_it_is(axis, value, words):
    p = LoadPoint(axis, value)
    assert p.words() == words and p.as_dict() == {axis: value} and planned_value(p.as_dict() | {"target": "a"}) == value


def test_an_entry_written_before_the_axis_was_named_reads_its_value_and_an_unknown_axis_is_refused():
    assert planned_value({"workload": "chat", "concurrency": 6.48, "target": "spec"}) == 6.48
    assert planned_value({"workload": "chat", "target": "spec"}) is None
    with pytest.raises(ValueError, match="'speed' is not one of concurrency, rate, trace_speed"):
        LoadPoint("speed", 1.0)
