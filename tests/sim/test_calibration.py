"""Driving pcie-8gpu-eagle3 like the measured table reproduces it within 10 %, crossover between C=10 and 30.

Measured the way the table was: a closed loop of C users, ~30-token conversational prompts,
200 output tokens (ignore_eos), aggregate output tok/s = total output tokens / wall time,
converted back to time-scale 1. Low concurrencies run at a lower time-scale, where the
client's own turnaround (about a millisecond a request) is a smaller share of a request's life.
"""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.slow

from loadgen.sim.process import SimProcess
from loadgen.sim.closedloop import closed_loop

TABLE = {1: (86.8, 92.7), 2: (145.5, 157.7), 5: (279.0, 290.8), 10: (428.0, 453.2),
         30: (759.3, 689.4), 70: (768.6, 752.8), 100: (775.0, 773.1), 250: (754.4, 718.1)}  # fmt: skip
# mode -> ((time-scale, {C: requests per user}), ...). Speculative requests need several each for
# their random accept lengths to average out. Baseline requests of one length finish together,
# so the whole batch waits while the client turns C requests around; at a high time-scale
# that wait is magnified, so baseline runs at 10x with one request per user at high C.
PLAN = {
    "spec": ((10.0, {1: 8, 2: 6, 5: 4, 10: 3}), (25.0, {30: 4, 70: 2, 100: 2, 250: 2})),
    "baseline": ((10.0, {1: 6, 2: 4, 5: 3, 10: 2, 30: 1, 70: 1, 100: 1, 250: 1}),),
}


def _measure_at(mode: str, scale: float, loads: dict[int, int]) -> dict[int, float]:
    out: dict[int, float] = {}
    with SimProcess(profile="pcie-8gpu-eagle3", mode=mode, time_scale=scale, seed=11) as sim:
        for c, per_user in loads.items():
            res = asyncio.run(closed_loop(sim.url, c, per_user, max_tokens=200))
            assert res.output_tokens == 200 * c * per_user
            out[c] = res.tok_per_s / scale
    return out


def _measure(mode: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for scale, loads in PLAN[mode]:
        got = _measure_at(mode, scale, loads)
        # A point off by more than 10 % on a starved machine is re-measured once at a lower
        # time-scale, where CPU stalls and client turnaround weigh less (costs time only then).
        want = {c: TABLE[c][0 if mode == "spec" else 1] for c in loads}
        again = {c: loads[c] for c in loads if abs(got[c] / want[c] - 1) > 0.10}
        if again:
            got.update(_measure_at(mode, max(1.0, scale / 2.5), again))
        out.update(got)
    return out


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[int, float]]:
    return {mode: _measure(mode) for mode in ("spec", "baseline")}


def test_table_within_10_percent(measured):
    report = []
    bad = []
    for c, (spec, base) in TABLE.items():
        s, b = measured["spec"][c], measured["baseline"][c]
        report.append(f"C={c}: spec {s:.1f}/{spec} ({s / spec - 1:+.1%}), baseline {b:.1f}/{base} ({b / base - 1:+.1%})")
        if abs(s / spec - 1) > 0.10 or abs(b / base - 1) > 0.10:
            bad.append(c)
    print("\n".join(report))
    assert not bad, "\n".join(report)


def test_crossover_between_10_and_30(measured):
    wins = {c: measured["spec"][c] > measured["baseline"][c] for c in TABLE}
    assert not any(wins[c] for c in (1, 2, 5, 10)), wins
    assert all(wins[c] for c in (30, 70, 250)), wins
