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
