"""The simulator's open-loop truth (sim.openloop, sim.knownrate) and the live simulator under open-loop load.

The virtual-time figures are checked against the cost model's own step costs at a low rate, against
queueing sense above capacity (the backlog and E2E grow with the window) and against the closed
loop's throughput at saturation; the live simulator is blasted faster than it serves to see SGLang's
503 and requests queued behind the running cap in its truth.
"""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import orjson
import pytest

from loadgen.sim import model, profiles
from loadgen.sim.known import _mix
from loadgen.sim.knownrate import (closed_form_capacity, known_capacity, known_rate_crossovers, known_saturation,
                                   meets)
from loadgen.sim.openloop import percentile, rate_truth, simulate_schedule
from loadgen.sim.process import SimProcess
from loadgen.timing.arrivals import arrivals
from tests.sim.helpers import request

PROFILE, TS = "pcie-8gpu-eagle3", 5.0
SIM = {"profile": PROFILE, "seed": 0, "protocol": "sglang", "max_tokens": "uniform:150,250", "ignore_eos": True,
       "time_scale": TS}
N = 1000  # window requests of the tests' long runs: 0.3 s each; the default 4000 takes ~1.3 s


@pytest.fixture(scope="module")
def mix():
    return _mix(SIM, "chat", 0)


def test_low_rate_is_one_prefill_then_decode_steps_of_one():
    prof = profiles.load(PROFILE)
    fixed = [(30, 0.6, 50)]
    t = rate_truth(PROFILE, "baseline", 0.2, mix=fixed, time_scale=TS, warmup_s=0.0, window_s=200.0)
    assert t.planned > 20 and not t.saturated and t.rejected == 0
    # an arrival finds the server idle: its first token is one prefill, every later one a decode of batch 1
    assert t.ttft_p50 == pytest.approx(model.prefill_ms(prof.cost, 30, False) / TS, rel=1e-6)
    assert t.tpot_p50 == pytest.approx(model.decode_ms(prof.cost, 1) / TS, rel=1e-6)
    assert t.itl_p50 == pytest.approx(t.tpot_p50, rel=1e-6) and t.mean_batch < 1.1
    # speculative: a prefill 1.2x dearer, then verify steps of batch 1 carrying 1.96 tokens each on average
    s = rate_truth(PROFILE, "spec", 0.2, mix=fixed, time_scale=TS, warmup_s=0.0, window_s=200.0)
    spec = prof.for_mode("spec")
    assert s.ttft_p50 == pytest.approx(model.prefill_ms(spec.cost, 30, True) / TS, rel=1e-6)
    per_token = model.spec_step_ms(spec.cost, spec.spec, 1) / model.mean_tokens_per_step(spec.spec, 0.6) / TS
    assert s.tpot_p50 == pytest.approx(per_token, rel=0.08)


def test_an_arrival_during_a_forward_waits_for_the_next():
    prof = profiles.load(PROFILE)
    pf = model.prefill_ms(prof.cost, 30, False) / 1000.0  # s at time-scale 1
    a, b = simulate_schedule(PROFILE, "baseline", [0.0, pf / 2], [(30, 0.6, 5)])
    assert a.admitted_s == 0.0 and a.first_token_s == pytest.approx(pf)
    assert b.admitted_s == pytest.approx(pf)  # it came mid-prefill: admitted when that forward ended
    assert b.first_token_s == pytest.approx(2 * pf)
    assert len(a.step_s) == 5 and sum(a.step_tokens) == a.output_tokens == 5
    assert a.tpot_s == pytest.approx((a.end_s - a.first_token_s) / 4)
    # an idle server jumps to the next arrival
    [c] = simulate_schedule(PROFILE, "baseline", [7.0], [(30, 0.6, 5)], time_scale=2.0)
    assert c.admitted_s == 7.0 and c.first_token_s == pytest.approx(7.0 + pf / 2.0)


def test_tpot_grows_with_rate(mix):
    tpot = [rate_truth(PROFILE, "baseline", r, mix=mix, time_scale=TS, long_run=True, requests=N).tpot_p50
            for r in (2.0, 8.0, 15.0)]
    assert tpot[0] < tpot[1] < tpot[2], tpot
    assert tpot[2] > 2 * tpot[0]


def test_above_capacity_the_backlog_grows_with_the_window(mix):
    below = rate_truth(PROFILE, "baseline", 12.0, mix=mix, time_scale=TS, long_run=True, requests=N)
    assert not below.saturated and below.achieved_rps == pytest.approx(below.offered_rps, rel=0.05)
    short = rate_truth(PROFILE, "spec", 25.0, mix=mix, time_scale=TS, warmup_s=5.0, window_s=20.0)
    long = rate_truth(PROFILE, "spec", 25.0, mix=mix, time_scale=TS, warmup_s=5.0, window_s=40.0)
    for t in (short, long):
        assert t.saturated and t.achieved_rps < 0.85 * t.offered_rps
        assert t.mean_batch == pytest.approx(48, abs=0.5)  # spec's running cap, always full
        assert t.waiting_end > t.waiting_start + 50
    assert long.e2e_p50 > 1.3 * short.e2e_p50 and long.ttft_p99 > 1.3 * short.ttft_p99
    assert long.tpot_p50 == pytest.approx(short.tpot_p50, rel=0.05)  # the batch is capped: TPOT is not


def test_spec_against_baseline_tpot_crossover_and_saturation(mix):
    """On pcie-8gpu-eagle3 speculation loses at a batch of ~1 (comm_ms per draft forward over PCIe) and
    wins past a batch of ~12, so spec's TPOT is higher at a low rate and lower at a high one."""
    lo_b, lo_s = (rate_truth(PROFILE, m, 1.0, mix=mix, time_scale=TS, long_run=True, requests=N) for m in
                  ("baseline", "spec"))
    hi_b, hi_s = (rate_truth(PROFILE, m, 16.0, mix=mix, time_scale=TS, long_run=True, requests=N) for m in
                  ("baseline", "spec"))
    assert lo_s.tpot_p50 > 1.03 * lo_b.tpot_p50 and hi_s.tpot_p50 < 0.85 * hi_b.tpot_p50
    near = {"estimate": 10.0, "ci_low": 8.0, "ci_high": 12.5, "low_c": 2.0, "high_c": 16.0}
    [k] = known_rate_crossovers(SIM, "chat", "tpot_p50", [near], points=6, requests=N)
    print(f"\ntpot_p50 rate crossover (chat, time-scale {TS:g}): {k.true:.2f} req/s over {k.searched}")
    assert k.covered and 9.0 < k.true < 12.0  # 10.5 by the default 4000-request runs on 9 rates
    # a window of N requests tells an overload of δ from Poisson noise once δ·N ≫ √(2N): 2000 for ~5 %
    sat = {m: known_saturation(SIM, "chat", m, 10.0, 30.0, requests=2 * N) for m in ("baseline", "spec")}
    closed = {m: closed_form_capacity(SIM, "chat", m) for m in ("baseline", "spec")}
    print(f"saturation (req/s): {sat}; closed loop's best / mean output: {closed}")
    for m in sat:  # an open loop saturates at or a little below a full closed loop (its bursts, its prefills)
        assert 0.9 * closed[m] < sat[m] < 1.05 * closed[m], (m, sat, closed)


def test_capacity_under_slos(mix):
    slos = [("ttft_p99", 160.0), ("tpot_p50", 8.0)]  # wall ms at time-scale 5: 800 and 40 ms of model time
    cap = known_capacity(SIM, "chat", "spec", slos, lo=1.0, hi=40.0, requests=N)
    print(f"\nspec capacity under {slos}: {cap:.2f} req/s")
    assert cap is not None and 5.0 < cap < 40.0
    at = rate_truth(PROFILE, "spec", cap, mix=mix, time_scale=TS, long_run=True, requests=N)
    above = rate_truth(PROFILE, "spec", cap * 1.03, mix=mix, time_scale=TS, long_run=True, requests=N)
    assert meets(at, slos) and not meets(above, slos)
    assert known_capacity(SIM, "chat", "spec", [("tpot_p50", 0.1)], lo=1.0, hi=40.0, requests=N) is None


def test_max_queued_rejects():
    # 20 at once: 3 fit the queue (admission happens at the next forward), the rest are refused
    reqs = simulate_schedule(PROFILE, "baseline", [0.0] * 20, [(30, 0.6, 20)], max_running=2, max_queued=3)
    refused = [r for r in reqs if r.rejected]
    assert len(refused) == 17 and all(r.admitted_s is None and r.output_tokens == 0 for r in refused)
    served = [r for r in reqs if not r.rejected]
    assert [r.output_tokens for r in served] == [20, 20, 20]
    assert served[2].admitted_s > served[0].first_token_s  # the third waited behind the cap of 2
    t = rate_truth(PROFILE, "spec", 40.0, mix=[(30, 0.6, 200)], time_scale=TS, warmup_s=2.0, window_s=10.0,
                   max_queued=8)
    assert t.rejected > 0.3 * t.planned and t.saturated and t.waiting_end <= 8


def test_same_seed_same_schedule_and_answer(mix):
    a = rate_truth(PROFILE, "spec", 9.0, mix=mix, time_scale=TS, warmup_s=5.0, window_s=20.0, seed=3)
    b = rate_truth(PROFILE, "spec", 9.0, mix=mix, time_scale=TS, warmup_s=5.0, window_s=20.0, seed=3)
    c = rate_truth(PROFILE, "spec", 9.0, mix=mix, time_scale=TS, warmup_s=5.0, window_s=20.0, seed=4)
    assert a == b and a != c
    # the schedule is the client's own planned offsets
    planned = list(itertools.takewhile(lambda x: x < 10.0, arrivals(9.0, "gamma:2").times(3)))
    reqs = simulate_schedule(PROFILE, "spec", planned, mix, time_scale=TS, seed=3)
    assert [r.planned_s for r in reqs] == planned
    assert reqs == simulate_schedule(PROFILE, "spec", planned, mix, time_scale=TS, seed=3)
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0 and percentile([1.0, 2.0], 99) == 2.0
    assert percentile([], 50) is None


def test_bad_input_is_one_line():
    from loadgen.errors import LoadgenError

    with pytest.raises(LoadgenError, match="no mode 'fast'"):
        simulate_schedule(PROFILE, "fast", [0.0], [(30, 0.6, 5)])
    with pytest.raises(LoadgenError, match="must not decrease"):
        simulate_schedule(PROFILE, "baseline", [1.0, 0.5], [(30, 0.6, 5)])
    with pytest.raises(LoadgenError, match="long_run"):
        rate_truth(PROFILE, "baseline", 1.0, mix=[(30, 0.6, 5)])
    with pytest.raises(LoadgenError, match="unknown rate metric"):
        known_rate_crossovers(SIM, "chat", "throughput", [])


def test_live_simulator_refuses_and_queues_an_open_loop_blast(live):
    """Sent every 2 ms, faster than 2 running + 2 queued 200-token requests are served (~0.2 s each at
    time-scale 20): the queue fills, the rest get SGLang's 503, the queued ones wait behind the cap."""
    args = ["--max-running-requests", "2", "--max-queued-requests", "2"]
    body = {"text": "open loop", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}

    async def blast(url):
        async with aiohttp.ClientSession() as s:
            async def one(i):
                await asyncio.sleep(i * 0.002)  # planned offsets, not a closed loop
                return await request(url, "/generate", {**body, "rid": f"ol-{i}"}, session=s)

            replies = await asyncio.gather(*(one(i) for i in range(16)))
            truth = (await request(url, "/loadgen/truth", method="GET", session=s)).json()
            return replies, truth

    with SimProcess(mode="baseline", time_scale=20, extra_args=args) as sim:
        replies, truth = asyncio.run(blast(sim.url))
    refused = [r for r in replies if r.status == 503]
    assert len(refused) >= 6, [r.status for r in replies]
    assert all(orjson.loads(r.body)["message"] == "The request queue is full." for r in refused)
    done = [t for t in truth if t["finish_reason"] == "length"]
    assert len(done) == sum(r.status == 200 for r in replies) >= 3
    assert all(t["completion_tokens"] == 200 for t in done)
    waited = [(t["admitted_ns"] - t["received_ns"]) / 1e6 for t in done]
    assert sum(w > 20.0 for w in waited) >= 1, waited  # queued behind the running cap of 2
