"""The simulator's scheduler run in virtual time: its exact steady state, the truth for crossover tests.

The analytic model (model.steady_state) approximates the scheduler; near a
crossover, where the two throughput curves differ by a percent or two, that
approximation moves the crossover by several concurrency steps. Here the real
``Scheduler`` code plans and applies every forward, with time advanced by each
forward's modelled cost instead of slept, for a closed loop of C users over
many thousand forwards. A finished request's successor arrives while the next
forward is already running, as it does over HTTP (the client's turnaround is
far shorter than a step but never zero), so it is admitted one forward later.

The users' first requests are spread evenly over one request's duration, as
loadgen's stages spread them (``StageSpec.ramp_s``). It matters: baseline
requests of equal length that start together stay in lock-step for ever and
share one prefill per round, while spread ones each pause the batch for their
own; at 85 users on two-crossovers that is 2.3 % of the throughput and moves
the second crossover from 85 to 91. Even spread, equal lengths keep whatever
phases a run's history gives them, so truths are best taken over varied
lengths (``mix`` with each request's own output tokens), which drift apart.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from loadgen.sim import model, profiles
from loadgen.sim.profiles import Profile
from loadgen.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from loadgen.sim.truth import TruthRecord


def simulated_throughput(profile: Profile | str, mode: str, concurrency: int, *, prompt_tokens: int = 26,
                         output_tokens: int = 200, accept: float | None = None,
                         mix: list[tuple[int, float, int]] | None = None, forwards: int = 30000,
                         warmup_forwards: int = 3000, seed: int = 0, spread: bool = True) -> float:
    """Output tokens per modelled second (time-scale 1) of a closed loop of ``concurrency`` users.

    ``mix``: (prompt tokens, acceptance probability, output tokens) of the real
    requests, used in turn, e.g. from :func:`workload_mix`; otherwise every
    request has ``prompt_tokens``, ``output_tokens`` and the profile's chat
    acceptance (or ``accept``).
    ``spread``: start the users evenly over one request's duration (as the
    analytic model estimates it); False starts them all at once.
    """
    start_ms = start_tokens = None
    t_ms = tokens = 0.0
    for k, (t_ms, tokens) in enumerate(_forwards(profile, mode, concurrency, prompt_tokens, output_tokens, accept,
                                                  mix, seed, spread)):
        if k == warmup_forwards:
            start_ms, start_tokens = t_ms, tokens
        if k + 1 == forwards:
            break
    return (tokens - start_tokens) / ((t_ms - start_ms) / 1000.0)


def simulated_windows(profile: Profile | str, mode: str, concurrency: int, *, window_s: float, n: int,
                      warmup_s: float = 5.0, mix: list[tuple[int, float, int]] | None = None, seed: int = 0,
                      output_tokens: int = 200) -> list[float]:
    """Output tokens per modelled second in each of ``n`` consecutive windows of ``window_s`` after ``warmup_s``:
    what a stage's steady window cut into equal bins gives the comparison (loadgen.analysis.crossover §1), from
    the scheduler itself in virtual time, so a benchmark draws thousands of seeded stages in seconds."""
    edges = [(warmup_s + i * window_s) * 1000.0 for i in range(n + 1)]
    counts = [0.0] * n
    prev_t = prev_tokens = 0.0
    j = 0
    for t_ms, tokens in _forwards(profile, mode, concurrency, 26, output_tokens, None, mix, seed, True):
        # a forward's tokens count in the window its end falls in (a stage's records stamp them at arrival)
        while j < n and t_ms > edges[j + 1]:
            j += 1
        if j >= n:
            break
        if t_ms > edges[0]:
            counts[j] += tokens - prev_tokens
        prev_t, prev_tokens = t_ms, tokens
    return [c / window_s for c in counts]


def _forwards(profile: Profile | str, mode: str, concurrency: int, prompt_tokens: int, output_tokens: int,
              accept: float | None, mix: list[tuple[int, float, int]] | None, seed: int, spread: bool):
    """(modelled ms, output tokens so far) after every forward of a closed loop of ``concurrency`` users."""
    prof = profiles.load(profile) if isinstance(profile, str) else profile
    p = prof.acceptance.chat if accept is None else accept
    mix = mix or [(prompt_tokens, p, output_tokens)]
    finished: list[SimRequest] = []
    sched = Scheduler(SchedulerConfig(prof, mode), on_finish=finished.append)
    rng = random.Random(seed)
    counter = [0]

    def new_request() -> SimRequest:
        n_prompt, p, n_out = mix[counter[0] % len(mix)]
        counter[0] += 1
        rid = str(counter[0])
        truth = TruthRecord(rid=rid, route="virtual", stream=True, mode=mode, received_ns=0,
                            prompt_tokens=n_prompt, prompt_kind="virtual", accept_p=p)
        return SimRequest(rid=rid, prompt_tokens=n_prompt, target_tokens=n_out,
                          finish_type="length", accept_p=p, rng=random.Random(rng.random()), truth=truth,
                          record=False)

    ramp_ms = 0.0
    if spread and concurrency > 1:
        n_prompt, p, n_out = mix[0]
        ss = model.steady_state(prof, mode, concurrency, prompt_tokens=n_prompt, output_tokens=n_out, accept=p)
        ramp_ms = ss.step_ms * n_out / ss.tokens_per_step
    starts = [u * ramp_ms / concurrency for u in range(concurrency)]  # model ms, ascending
    t_ms = 0.0
    tokens = 0
    while True:
        if not sched.running and not sched.waiting:
            if finished:  # an idle server takes the successors as they come
                for _ in range(len(finished)):
                    sched.submit(new_request())
                finished.clear()
            elif starts:
                t_ms = max(t_ms, starts[0])  # idle until the next user starts
        while starts and starts[0] <= t_ms:
            starts.pop(0)
            sched.submit(new_request())
        admitted, ms = sched.next_forward()
        returning, finished[:] = list(finished), []
        for _ in returning:  # successors arrive during this forward: admitted at the next one
            sched.submit(new_request())
        before = sched.stats.generated_tokens
        t_ms += ms
        sched.complete_forward(admitted, int(t_ms * 1e6))
        # record=False leaves the prefill token out of the stats: count it here
        tokens += sched.stats.generated_tokens - before + len(admitted)
        yield t_ms, tokens


def workload_mix(profile: Profile | str, workload: str, n: int = 500, seed: int = 0, lengths=None,
                 protocol: str = "sglang", sim_seed: int = 0) -> list[tuple[int, float, int]]:
    """(prompt tokens, acceptance, output tokens) of a workload's first ``n`` requests, as the simulator plans them.

    Each request goes through what the simulator does with it over HTTP: the
    protocol's body, the route's parser, the context check and the request
    planner, so natural stops (without ignore_eos) get the length the
    simulator started with ``--seed sim_seed`` would give them. ``lengths`` is
    the run's length control (a :class:`loadgen.workloads.base.Lengths`).
    """
    import itertools

    from loadgen.client.protocols import get_protocol
    from loadgen.sim.requestplan import make_request
    from loadgen.sim.validate import check_context, parse_chat, parse_completions, parse_generate
    from loadgen.workloads import Lengths, resolve

    prof = profiles.load(profile) if isinstance(profile, str) else profile
    proto = get_protocol(protocol)
    parse = {"sglang": parse_generate, "completions": parse_completions, "chat": parse_chat}[protocol]
    out = []
    for i, req in enumerate(itertools.islice(resolve(workload, lengths or Lengths()).requests(seed), n)):
        job = parse(proto.build(req, f"mix-{i}"))
        sreq, _, _ = make_request(job, rid=f"mix-{i}", profile=prof, mode="baseline", seed=sim_seed, counter=i + 1,
                                  max_new=check_context(job, prof.context_length), received_ns=0, record=False)
        out.append((sreq.prompt_tokens, sreq.accept_p, sreq.target_tokens))
    return out


@dataclass(frozen=True)
class VirtualCrossover:
    concurrency: float
    spec_wins_above: bool
    """True if ``to`` (spec by default) is the faster mode just above this concurrency."""


def simulated_crossovers(profile: Profile | str, concurrencies: list[int], *, modes: tuple[str, str] = ("baseline", "spec"),
                         **kw) -> list[VirtualCrossover]:
    """Where (to − from) throughput changes sign over ``concurrencies``, interpolated on log C.

    ``modes``: (from, to), two of the profile's modes; baseline and spec unless told.
    """
    lo_mode, hi_mode = modes
    diffs = []
    for c in concurrencies:
        b = simulated_throughput(profile, lo_mode, c, **kw)
        s = simulated_throughput(profile, hi_mode, c, **kw)
        diffs.append((s - b) / b)
    return sign_changes(concurrencies, diffs)


def sign_changes(concurrencies: list[int], diffs: list[float]) -> list[VirtualCrossover]:
    """Each sign change of ``diffs`` between neighbouring concurrencies, interpolated on log C."""
    import math

    out = []
    for (c0, d0), (c1, d1) in zip(zip(concurrencies, diffs), zip(concurrencies[1:], diffs[1:])):
        if d0 and d1 and (d0 < 0) != (d1 < 0):  # a sign change between neighbouring grid points
            f = d0 / (d0 - d1)
            at = math.exp(math.log(c0) + f * (math.log(c1) - math.log(c0)))
            out.append(VirtualCrossover(at, d1 > 0))
    return out
