"""The array recorder and merge agree with hdrh's own value-by-value code, bucket for bucket."""

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.histograms import Hist

values = st.lists(
    st.one_of(st.floats(0, 5e9, allow_nan=False), st.integers(0, 10).map(float)), min_size=0, max_size=300
)
layouts = st.sampled_from([(1.0, 3), (1000.0, 3), (1.0, 2)])


def reference(vals, counts, scale, digits) -> Hist:
    h = Hist(scale, digits=digits)
    top = h.h.highest_trackable_value
    for v, c in zip(vals, counts):
        h.h.record_value(min(max(round(v * scale), 1), top), c)
    return h


def same(a: Hist, b: Hist) -> None:
    assert list(a.h.counts) == list(b.h.counts)
    assert (a.h.total_count, a.h.min_value, a.h.max_value) == (b.h.total_count, b.h.min_value, b.h.max_value)
    assert a.summary() == b.summary()
    assert a.encode() == b.encode()


@settings(max_examples=150, deadline=None)
@given(values, st.data(), layouts)
def test_record_many_equals_value_by_value(vals, data, layout):
    scale, digits = layout
    counts = data.draw(st.lists(st.integers(1, 5), min_size=len(vals), max_size=len(vals)))
    h = Hist(scale, digits=digits)
    h.record_many(vals, counts)
    same(h, reference(vals, counts, scale, digits))


@settings(max_examples=100, deadline=None)
@given(values, values, layouts)
def test_add_equals_the_union(a_vals, b_vals, layout):
    # (hdrh's own add sets min to 0 when either side is empty: the union is the reference)
    scale, digits = layout
    ours = reference(a_vals, [1] * len(a_vals), scale, digits)
    ours.add(reference(b_vals, [1] * len(b_vals), scale, digits))
    both = a_vals + b_vals
    same(ours, reference(both, [1] * len(both), scale, digits))
