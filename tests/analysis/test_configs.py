"""The N-configuration analysis (loadgen/analysis/configs.py) on synthetic ladders with a known truth."""

from __future__ import annotations

import math
import random

import pytest

from loadgen.analysis.configs import ConfigsResult, analyze_configs, policy_sentence
from loadgen.analysis.locate import analyze
from loadgen.analysis.results import StageSamples

# The measured table of issue 15 (aggregate output tok/s): baseline, EAGLE-3 topk=1, EAGLE-3 topk=4.
TABLE = {1: (92.7, 86.8, 80.9), 2: (157.7, 145.5, 128.3), 5: (290.8, 279.0, 189.2), 10: (453.2, 428.0, 246.3),
         30: (689.4, 759.3, 313.3), 70: (752.8, 768.6, 349.3), 100: (773.1, 775.0, 353.1),
         250: (718.1, 754.4, 353.8)}
LABELS = ["baseline", "spec", "spec-topk4"]


def _stages(curves: dict[str, dict[int, float]], rng: random.Random, cv: float = 0.02, n: int = 10):
    return {label: [StageSamples(c, [v * (1 + rng.gauss(0, cv)) for _ in range(n)], True) for c, v in per.items()]
            for label, per in curves.items()}


def _table_curves() -> dict[str, dict[int, float]]:
    return {label: {c: v[i] for c, v in TABLE.items()} for i, label in enumerate(LABELS)}


def test_the_tables_three_configurations():
    res = analyze_configs("tok/s", _stages(_table_curves(), random.Random(3)), labels=LABELS, ladder=list(TABLE))
    assert len(res.pairs) == 3 and math.isclose(res.pair_confidence, 0.9 ** (1 / 3))
    best = {a.concurrency: a.best for a in res.at}
    assert all(a.best != "spec-topk4" and "spec-topk4" not in a.leaders for a in res.at)
    assert [best[c] for c in (1, 2, 5, 10)] == ["baseline"] * 4 and best[30] == "spec"
    # the envelope is the best mean, and the best's own shortfall is 0
    for a in res.at:
        assert a.envelope == max(a.means[x] for x in LABELS) and a.shortfall[a.envelope_label].delta == 0.0
        assert a.shortfall["spec-topk4"].ci_high < 0  # topk4 is measurably short of the envelope everywhere
    for a in res.at:  # every candidate against the reference, its joint gap the pair's delta the right way round
        pair = next(p for p in res.pairs if (p.a, p.b) == ("baseline", "spec")).analysis
        comp = next(k for k in pair.comparisons if k.concurrency == a.concurrency)
        assert math.isclose(a.vs_reference["spec"].delta, comp.delta) and set(a.vs_reference) == {"spec", "spec-topk4"}
        g = a.vs_reference["spec"]
        assert g.ci_low <= g.delta <= g.ci_high and g.against == "baseline"
    [sw] = [w for w in res.switches if (w.from_label, w.to_label) == ("baseline", "spec")]
    assert sw.confirmed and 10 <= sw.ci_low < sw.ci_high <= 30
    assert res.policy[0].labels == ["baseline"] and res.policy[0].c_to == sw.estimate
    text = policy_sentence(res, "output throughput")
    assert text.startswith("output throughput: use baseline for C ≤ ") and "joint interval" in text
    again = ConfigsResult.from_dict(res.to_dict())
    assert again.to_dict() == res.to_dict()


def test_two_configurations_are_the_pair_analysis():
    st = _stages({k: v for k, v in _table_curves().items() if k != "spec-topk4"}, random.Random(5))
    res = analyze_configs("tok/s", st, labels=["baseline", "spec"], ladder=list(TABLE))
    plain = analyze("tok/s", st["baseline"], st["spec"], ladder=list(TABLE))
    assert res.pair_confidence == 0.9
    assert res.pairs[0].analysis.to_dict() == plain.to_dict()
    assert [(w.estimate, w.ci_low, w.ci_high) for w in res.switches] == \
        [(x.estimate, x.ci_low, x.ci_high) for x in plain.crossovers]


def test_switch_intervals_cover_the_truth_jointly():
    """Three configurations whose differences cross at known points: baseline → A at C=12 and A → B at
    C=60 (the deltas linear in log C); the policy's two switch intervals both cover the truth in at least
    9 of 10 seeds (they are joint 90 % intervals), and C is the best configuration nowhere."""
    ladder = [1, 2, 5, 10, 20, 30, 50, 70, 100, 250]

    a60 = 1000.0 * (1 + 0.15 * math.log(60 / 12))
    curves = {"baseline": {c: 1000.0 for c in ladder},
              "A": {c: 1000.0 * (1 + 0.15 * math.log(c / 12)) for c in ladder},
              "B": {c: a60 + 250.0 * math.log(c / 60) for c in ladder},  # steeper than A: above it past 60
              "C": {c: 800.0 for c in ladder}}
    covered = 0
    for seed in range(10):
        res = analyze_configs("tok/s", _stages(curves, random.Random(seed), cv=0.03), labels=list(curves),
                              ladder=ladder, seed=seed)
        assert all(a.best != "C" for a in res.at)
        sws = {(w.from_label, w.to_label): w for w in res.switches}
        a, b = sws.get(("baseline", "A")), sws.get(("A", "B"))
        ok = all(w is not None and w.confirmed and w.ci_low <= truth <= w.ci_high
                 for w, truth in ((a, 12.0), (b, 60.0)))
        covered += ok
    print(f"joint switch intervals covering both true switches: {covered}/10")
    assert covered >= 9


def test_adaptive_is_measured_never_chosen_and_an_empty_configuration_is_excluded():
    curves = _table_curves()
    curves["adaptive"] = {c: max(v) * 1.12 for c, v in TABLE.items()}  # better than all: still never "best"
    st = _stages(curves, random.Random(1))
    st["dead"] = []
    res = analyze_configs("tok/s", st, labels=[*LABELS, "adaptive", "dead"], adaptive=["adaptive"],
                          ladder=list(TABLE))
    assert res.excluded == {"dead": "no stage with enough windows for this metric"}
    assert all(a.best != "adaptive" and "adaptive" not in a.leaders for a in res.at)
    assert all(a.shortfall["adaptive"].ci_low > 0 for a in res.at)  # it beats the envelope, and says so
    assert "dead" not in {x for a in res.at for x in a.means}


def test_a_lead_over_a_configuration_resampled_to_nothing_is_unbounded_not_a_crash():
    """(b − a)/a of −1 (b's window figure resampled to 0: a slow host's 6 s windows held one request
    each) inverts to an unbounded (a − b)/b; `loadgen crossover` on three llama.cpp servers died there."""
    from loadgen.analysis.configs import _invert

    assert _invert(-1.0, 0.5) == (pytest.approx(1 / 1.5 - 1), math.inf)
    assert _invert(-0.5, 1.0) == (pytest.approx(-0.5), pytest.approx(1.0))
