"""The simulator's scheduler run in virtual time: its exact steady state, the truth for crossover tests.

The analytic model (model.steady_state) approximates the scheduler; near a
crossover, where the two throughput curves differ by a percent or two, that
approximation moves the crossover by several concurrency steps. Here the real
``Scheduler`` code plans and applies every forward, with time advanced by each
forward's modelled cost instead of slept, for a closed loop of C users over
many thousand forwards. A finished request's successor arrives while the next
forward is already running, as it does over HTTP (the client's turnaround is
far shorter than a step but never zero), so it is admitted one forward later.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from loadgen.sim import profiles
from loadgen.sim.profiles import Profile
from loadgen.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from loadgen.sim.truth import TruthRecord


def simulated_throughput(profile: Profile | str, mode: str, concurrency: int, *, prompt_tokens: int = 26,
                         output_tokens: int = 200, accept: float | None = None,
                         mix: list[tuple[int, float]] | None = None, forwards: int = 30000,
                         warmup_forwards: int = 3000, seed: int = 0) -> float:
    """Output tokens per modelled second (time-scale 1) of a closed loop of ``concurrency`` users.

    ``mix``: (prompt tokens, acceptance probability) of the real prompts, used in
    turn, e.g. from :func:`workload_mix`; otherwise every request has
    ``prompt_tokens`` and the profile's chat acceptance (or ``accept``).
    """
    prof = profiles.load(profile) if isinstance(profile, str) else profile
    p = prof.acceptance.chat if accept is None else accept
    mix = mix or [(prompt_tokens, p)]
    finished: list[SimRequest] = []
    sched = Scheduler(SchedulerConfig(prof, mode), on_finish=finished.append)
    rng = random.Random(seed)
    counter = [0]

    def new_request() -> SimRequest:
        n_prompt, p = mix[counter[0] % len(mix)]
        counter[0] += 1
        rid = str(counter[0])
        truth = TruthRecord(rid=rid, route="virtual", stream=True, mode=mode, received_ns=0,
                            prompt_tokens=n_prompt, prompt_kind="virtual", accept_p=p)
        return SimRequest(rid=rid, prompt_tokens=n_prompt, target_tokens=output_tokens,
                          finish_type="length", accept_p=p, rng=random.Random(rng.random()), truth=truth,
                          record=False)

    for _ in range(concurrency):
        sched.submit(new_request())
    t_ms = 0.0
    start_ms = start_tokens = None
    tokens = 0
    for k in range(forwards):
        admitted, ms = sched.next_forward()
        returning, finished[:] = list(finished), []
        for _ in returning:  # successors arrive during this forward: admitted at the next one
            sched.submit(new_request())
        before = sched.stats.generated_tokens
        t_ms += ms
        sched.complete_forward(admitted, int(t_ms * 1e6))
        # record=False leaves the prefill token out of the stats: count it here
        tokens += sched.stats.generated_tokens - before + len(admitted)
        if k == warmup_forwards:
            start_ms, start_tokens = t_ms, tokens
    return (tokens - start_tokens) / ((t_ms - start_ms) / 1000.0)


def workload_mix(profile: Profile | str, workload: str, n: int = 500, seed: int = 0) -> list[tuple[int, float]]:
    """(prompt tokens, acceptance) of a workload's first ``n`` requests, as the simulator judges them.

    Prompts are taken as /generate sends them (chat messages rendered to one prompt).
    """
    import itertools

    from loadgen import tokens
    from loadgen.sim.acceptance import predictability
    from loadgen.workload import Lengths, resolve

    prof = profiles.load(profile) if isinstance(profile, str) else profile
    out = []
    for req in itertools.islice(resolve(workload, Lengths()).requests(seed), n):
        prompt = req.as_prompt()
        out.append((tokens.count(prompt), predictability(prompt, req.temperature, prof.acceptance).p))
    return out


@dataclass(frozen=True)
class VirtualCrossover:
    concurrency: float
    spec_wins_above: bool


def simulated_crossovers(profile: Profile | str, concurrencies: list[int], **kw) -> list[VirtualCrossover]:
    """Where (spec − baseline) throughput changes sign over ``concurrencies``, interpolated on log C."""
    import math

    diffs = []
    for c in concurrencies:
        b = simulated_throughput(profile, "baseline", c, **kw)
        s = simulated_throughput(profile, "spec", c, **kw)
        diffs.append((s - b) / b)
    out = []
    for (c0, d0), (c1, d1) in zip(zip(concurrencies, diffs), zip(concurrencies[1:], diffs[1:])):
        if d0 and d1 and (d0 < 0) != (d1 < 0):  # a sign change between neighbouring grid points
            f = d0 / (d0 - d1)
            at = math.exp(math.log(c0) + f * (math.log(c1) - math.log(c0)))
            out.append(VirtualCrossover(at, d1 > 0))
    return out
