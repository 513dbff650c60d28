"""The virtual-time truth (sim.virtual): the steady state of the simulator's schedule.

Equal-length baseline requests keep the phases they start with: started
together they share one prefill per round for ever, spread out (as loadgen
starts a stage's users) each pauses the batch for its own, 2.3 % less
throughput at 85 users on two-crossovers, enough to move its second crossover
by 8 users. Varied lengths drift apart whatever the start, and the crossover
bench uses them. How close the live simulator lands on the virtual figure (within 0.1 % baseline, 0.5 %
spec over 15 s on a quiet host) is wall-clock throughput: `loadgen bench crossover --truth live` prints the
live crossover beside the virtual one, not a test.
"""

from __future__ import annotations

from loadgen.sim.virtual import simulated_throughput, workload_mix
from loadgen.workloads import Lengths

PROFILE, C = "two-crossovers", 85


def test_spread_users_pay_their_own_prefills():
    mix = workload_mix(PROFILE, "chat", lengths=Lengths.parse(None, "200", None, True))
    spread = simulated_throughput(PROFILE, "baseline", C, mix=mix, forwards=8000, warmup_forwards=1500)
    lockstep = simulated_throughput(PROFILE, "baseline", C, mix=mix, forwards=8000, warmup_forwards=1500,
                                    spread=False)
    assert spread < lockstep * 0.985
    # speculative requests drift apart by themselves: how they start does not matter
    s_spread = simulated_throughput(PROFILE, "spec", C, mix=mix, forwards=8000, warmup_forwards=1500)
    s_lock = simulated_throughput(PROFILE, "spec", C, mix=mix, forwards=8000, warmup_forwards=1500, spread=False)
    assert abs(s_spread - s_lock) < 0.01 * s_lock


def test_known_crossover_beside_a_reported_one():
    """What `loadgen crossover` prints beside its finding on the embedded simulators."""
    from loadgen.sim.known import known_crossovers

    sim = {"profile": "pcie-8gpu-eagle3", "seed": 0, "protocol": "sglang", "max_tokens": "uniform:150,250",
           "ignore_eos": True}
    near = {"estimate": 12.0, "ci_low": 10.0, "ci_high": 13.0, "low_c": 10, "high_c": 30}
    [k] = known_crossovers(sim, "chat", [near])
    assert k.covered and 11 < k.true < 12.2, k  # 11.5 by the bench's 30000-forward truth
    [k] = known_crossovers(sim, "chat", [{**near, "ci_low": 14.0, "ci_high": 20.0}])
    assert not k.covered and k.true < 14
    # speculation wins everywhere on no-crossover: a reported one is a false alarm
    [k] = known_crossovers({**sim, "profile": "no-crossover"}, "chat", [near])
    assert k.true is None and not k.covered


def test_no_own_answer_for_traffic_the_virtual_model_does_not_plan():
    """Sessions (later turns carry the replies, a shared prefix lengthens every prompt) and a prefix cache are not
    in the virtual model: the simulator's own answer is refused in one line, which every caller reports as not
    available, rather than printed for other traffic."""
    import pytest

    from loadgen.errors import LoadgenError
    from loadgen.sim.known import known_crossovers
    from loadgen.sim.knownrate import known_rate_metric

    x = [{"estimate": 10.0, "ci_low": 8.0, "ci_high": 12.0}]
    base = {"profile": "pcie-8gpu-eagle3", "seed": 0, "protocol": "sglang", "max_tokens": "32"}
    for extra, why in (({"prefix_cache": 100000}, "prefix cache"), ({"sessions": {"turns": 3}}, "sessions"),
                       ({"sessions": {"turns": 1, "shared_prefix": 40}}, "sessions")):
        with pytest.raises(LoadgenError, match=why):
            known_crossovers({**base, **extra}, "chat", x)
        with pytest.raises(LoadgenError, match=why):
            known_rate_metric({**base, **extra}, "chat", "baseline", 5.0, "ttft_p50", warmup_s=1.0,
                              window_s=5.0)
