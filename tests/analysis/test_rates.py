"""The rate-axis analysis's parts: the paired comparison of one schedule's windows, saturation read from a
stage, the capacity's crossing, the SLO syntax."""

from __future__ import annotations

import math
import random

import pytest

from loadgen.analysis.crossover import StageSamples, analyze
from loadgen.analysis.rates import _crossing, _one, capacity_sentence, Capacity, parse_slos, SloTerm
from loadgen.errors import LoadgenError
from loadgen.stage.saturation import saturation


def _shared_load(n: int, seed: int, effect: float) -> tuple[list[float], list[float]]:
    """Two targets' per-window values under one schedule: a slow load swing both feel (±40 %), their own
    noise (3 %), and the candidate ``effect`` better."""
    rng = random.Random(seed)
    load, out_a, out_b = 0.0, [], []
    for _ in range(n):
        load = 0.8 * load + rng.gauss(0, 0.25)
        base = 100 * math.exp(load)
        out_a.append(base * math.exp(rng.gauss(0, 0.03)))
        out_b.append(base * (1 + effect) * math.exp(rng.gauss(0, 0.03)))
    return out_a, out_b


def test_pairing_cancels_what_one_schedule_does_to_both():
    told = {True: 0, False: 0}
    for seed in range(10):
        a, b = _shared_load(30, seed, 0.10)
        for paired in (True, False):
            res = analyze("decode_rate", [StageSamples(5.0, a, True)], [StageSamples(5.0, b, True)], paired=paired)
            c = res.comparisons[0]
            if c.ci_low > 0:
                told[paired] += 1
                assert c.ci_low < 0.10 < c.ci_high or paired  # unpaired, when it tells, still covers
    assert told[True] >= 9 and told[False] <= 3, told


def test_paired_intervals_cover_the_effect():
    covered = 0
    for seed in range(40):
        a, b = _shared_load(30, 100 + seed, 0.05)
        c = analyze("x", [StageSamples(5.0, a, True)], [StageSamples(5.0, b, True)], paired=True).comparisons[0]
        covered += c.ci_low <= 0.05 <= c.ci_high
    assert covered >= 33, covered  # nominal 90 %


def _stage(**kw) -> dict:
    d = {"open_loop": {"rate": 10.0}, "window": {"duration_s": 20.0}, "requests": {"started": 200},
         "ended_in_window": {"requests": 198}, "timeline": {}, "cut": None}
    d.update(kw)
    return d


def test_saturation_signs():
    assert not saturation(_stage()).saturated
    assert not saturation({"concurrency": 4}).saturated  # closed loop: never called saturated here
    short = saturation(_stage(ended_in_window={"requests": 150}))
    assert short.saturated and "ended inside the window" in short.why and short.ended_per_s == 7.5
    noise = saturation(_stage(requests={"started": 20}, ended_in_window={"requests": 17}))
    assert not noise.saturated  # 15 % short of 20 is within 3√n
    cut = saturation(_stage(cut={"by": "max-cooldown", "at_s": 48.0, "phase": "cool-down"}))
    assert cut.saturated and "cool-down" in cut.why


def test_a_late_client_does_not_make_a_saturation_its_own():
    lag = lambda ms: {"rate": 10.0, "dispatch_lag_ms": {"max": ms}, "lag_flagged": True}
    # 50 of 200 requests behind: 5 s of arrivals at 10 req/s; a 30 ms lag cannot explain that, a 2 s one could
    server = saturation(_stage(ended_in_window={"requests": 150}, open_loop=lag(30.0)))
    assert server.saturated and server.servers
    client = saturation(_stage(ended_in_window={"requests": 150}, open_loop=lag(2000.0)))
    assert client.saturated and not client.servers
    # what a saturated server ended bounds what it can carry from above: 150 in 20 s, plus two standard errors
    assert server.ceiling_per_s == pytest.approx(7.5 * (1 + 2 / math.sqrt(150)))
    assert saturation(_stage()).ceiling_per_s is None


def test_capacity_crossing_on_log_rate():
    rows = [{"rate": 4.0, "margin": -1.0}, {"rate": 16.0, "margin": 1.0}]
    est, how = _crossing(rows, "margin")
    assert how == "crossed" and est == pytest.approx(8.0)
    est, how = _crossing([{"rate": 4.0, "margin": -1.0}, {"rate": 16.0, "margin": math.inf}], "margin")
    assert how == "between" and est == pytest.approx(8.0)
    # the saturated stage above ended 9 req/s at most: the capacity lies between 4 and 9, not 4 and 16
    est, how = _crossing([{"rate": 4.0, "margin": -1.0}, {"rate": 16.0, "margin": math.inf, "ceiling": 9.0}], "margin")
    assert how == "between" and est == pytest.approx(6.0)
    rows = [{"rate": 4.0, "margin": -1.0, "low": -1.2, "high": -0.8},
            {"rate": 16.0, "margin": math.inf, "low": math.inf, "high": math.inf, "ceiling": 9.0}]
    assert _one(rows) == (pytest.approx(6.0), 4.0, 9.0, "between")
    # a stage whose value sits exactly at the limit (bucketed HDR values do) is the crossing itself, read exactly:
    # on the log scale it came out 24.000000000000004
    assert _crossing([{"rate": 24.0, "margin": 0.0}, {"rate": 27.0, "margin": 0.3}], "margin") == (24.0, "crossed")
    assert _crossing([{"rate": 4.0, "margin": 0.5}], "margin") == (None, "below")
    assert _crossing([{"rate": 4.0, "margin": -0.5}], "margin") == (None, "above")


def test_slo_syntax_and_sentence():
    slos = parse_slos("ttft_p99=0.8s,tpot_p50=40")
    assert slos == [SloTerm("ttft", 99.0, 800.0), SloTerm("tpot", 50.0, 40.0)]
    assert slos[0].metric == "ttft_planned" and slos[1].metric == "tpot"
    for bad in ("", "ttft=1", "ttft_p99", "ttft_p99=-1", "ttft_p100=5", "gpu_p50=1"):
        with pytest.raises(LoadgenError):
            parse_slos(bad)
    caps = {"base": Capacity("base", 12.0, 11.0, 13.5), "spec": Capacity("spec", 15.6, 14.1, 18.0)}
    assert capacity_sentence(caps, slos, "base", ["spec"]) == (
        "with spec, capacity under TTFT p99 ≤ 800 ms and TPOT p50 ≤ 40 ms is 15.6 req/s (14.1–18), "
        "against 12 req/s (11–13.5) for base.")


def test_a_per_request_mean_weights_each_window_by_its_requests():
    """Windows of an open loop hold unequal numbers of requests, and the heavy ones are the slow ones: the
    stage's E2E mean is the mean over its requests (sum over count), not the mean of window means."""
    from loadgen.analysis.rates import aligned, _metric

    m = _metric("e2e_planned_mean")
    counts = [10, 40, 10, 40, 10, 40]
    tl_a = {"bin_s": 1.0, "completed": counts, "e2e_planned_sum": [n * (100 if n == 10 else 300) for n in counts]}
    tl_b = {"bin_s": 1.0, "completed": counts, "e2e_planned_sum": [n * (100 if n == 10 else 200) for n in counts]}
    sa, sb = aligned(m, tl_a, tl_b)
    assert sa.weights == counts and sb.weights == counts
    c = analyze("e2e_planned_mean", [StageSamples(10.0, sa.samples, False, sa.weights)],
                [StageSamples(10.0, sb.samples, False, sb.weights)], paired=True).comparisons[0]
    per_request = (10 * 100 + 40 * 200) / (10 * 100 + 40 * 300) - 1  # -30.8 %
    assert c.delta == pytest.approx(per_request)
    assert c.mean_baseline == pytest.approx((10 * 100 + 40 * 300) / 50)
    assert (150 / 200 - 1) != pytest.approx(per_request, abs=0.05)  # what equal weights said: -25 %
    # a rate over the bin's time has no weights: tokens/s per window averages to the stage's tokens/s
    assert aligned(_metric("goodput_requests_per_s"), {"bin_s": 1.0, "good": [1, 2]},
                   {"bin_s": 1.0, "good": [1, 2]})[0].weights is None


def test_weighted_replicates_are_ratio_estimators_of_the_windows_drawn():
    from loadgen.analysis import stats

    xs = [1.0, 5.0, 2.0, 8.0, 3.0, 7.0, 4.0]
    ws = [3.0, 1.0, 2.0, 1.0, 5.0, 2.0, 1.0]
    plain = stats.circular_block_bootstrap_means(xs, 3, 50, random.Random(4))
    equal = stats.circular_block_bootstrap_means(xs, 3, 50, random.Random(4), [2.0] * 7)
    assert equal == pytest.approx(plain)  # same draws: paired series stay paired
    weighted = stats.circular_block_bootstrap_means(xs, 3, 2000, random.Random(5), ws)
    target = stats.weighted_mean(xs, ws)
    assert abs(stats.mean(weighted) - target) < 0.15 * target
    assert min(weighted) >= min(xs) and max(weighted) <= max(xs)
    with pytest.raises(ValueError, match="weights"):
        analyze("x", [StageSamples(1.0, [1.0, 2.0], False, [1.0])], [StageSamples(1.0, [1.0, 2.0], False)])


def test_a_rate_crossover_interval_ends_at_measured_stages():
    """Between two stages the difference can bend (towards saturation it does: the simulator's decode-rate
    difference is -1.1 % at 20 req/s and +12.8 % at 27, zero at 21.2 where a straight line says 20.5), so
    on the rate axis the interval reaches out to the stages around the gaps it lies in."""
    rng = random.Random(3)
    rates = [5.0, 10.0, 20.0, 27.0, 32.0]
    truth = {5.0: 0.057, 10.0: 0.057, 20.0: 0.011, 27.0: -0.128, 32.0: -0.33}  # spec's E2E against baseline's

    def stages(effect: float) -> tuple[list[float], list[float]]:
        a = [100 * math.exp(rng.gauss(0, 0.05)) for _ in range(20)]
        return a, [x * (1 + effect) * math.exp(rng.gauss(0, 0.01)) for x in a]

    pairs = {r: stages(truth[r]) for r in rates}
    kw = dict(paired=True)
    inside = analyze("e2e", [StageSamples(r, pairs[r][0], False) for r in rates],
                     [StageSamples(r, pairs[r][1], False) for r in rates], **kw)
    staged = analyze("e2e", [StageSamples(r, pairs[r][0], False) for r in rates],
                     [StageSamples(r, pairs[r][1], False) for r in rates], to_stages=True, **kw)
    (x,), (y,) = inside.crossovers, staged.crossovers
    assert x.estimate == pytest.approx(y.estimate)
    assert 20.0 < x.ci_low and x.ci_high < 27.0  # interpolated: inside the gap
    assert (y.ci_low, y.ci_high) == (pytest.approx(20.0), pytest.approx(27.0))
    again = type(staged).from_dict(staged.to_dict())
    from loadgen.analysis.crossover import judge

    assert judge(again).crossovers[0].ci_high == pytest.approx(27.0)  # kept through rates.json


def test_refined_rates_bisect_the_gap_that_holds_the_interval():
    from loadgen.analysis.refine import refine_plan, refine_rates
    from loadgen.analysis.results import Crossover, MetricAnalysis, StageComparison

    def analysis(rates, lo, hi):
        cs = [StageComparison(r, False, 20, 20, 1.0, 1.0, 0.0, -0.1, 0.1, 0.9, 0.01, "tie") for r in rates]
        x = Crossover(low_c=rates[0], high_c=rates[-1], estimate=(lo * hi) ** 0.5, ci_low=lo, ci_high=hi,
                      direction="baseline_to_spec", confidence=0.9, stage_level=0.95)
        return MetricAnalysis("e2e", False, 0.9, 0.01, True, cs, [], [x])

    assert refine_rates(analysis([10.0, 20.0, 27.0], 20.0, 27.0)) == [23.2]
    assert refine_rates(analysis([10.0, 20.0, 27.0], 10.0, 27.0)) == [14.1]  # the wider gap first
    assert refine_rates(analysis([20.0, 23.2, 27.0], 20.0, 23.2)) == []  # within 1.3x: settled
    assert refine_rates(analysis([10.0, 20.0, 27.0], 20.0, 27.0), budget_stages=0) == []
    assert refine_plan(analysis([10, 20, 27], 20, 27)) == [23]  # the concurrency axis: whole numbers
