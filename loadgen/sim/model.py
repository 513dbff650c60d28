"""The cost model (how long a forward takes) and its analytic steady state.

The scheduler (scheduler.py) uses the step-cost functions below to time every
forward; ``expected_throughput`` predicts what a closed loop of C users will
measure, and ``true_crossovers`` where speculation stops (or starts) paying off.
Both are analytic, so tests can compare the running simulator against them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from loadgen.sim import profiles
from loadgen.sim.profiles import Cost, Profile, Spec


def coverage(cost: Cost, tokens: float) -> float:
    """Expected fraction of MoE experts touched by ``tokens`` tokens (each picks k of E at random)."""
    if not cost.experts or not cost.experts_per_token or tokens <= 0:
        return 0.0
    return 1.0 - (1.0 - cost.experts_per_token / cost.experts) ** tokens


def eager(cost: Cost, requests: int, graph_max_bs: int) -> float:
    """Launch overhead a forward pays when its batch is too large for the captured CUDA graphs."""
    return cost.eager_ms if 0 < graph_max_bs < requests else 0.0


def forward_ms(cost: Cost, requests: int, tokens: int, graph_max_bs: int | None = None) -> float:
    """One target-model forward over ``requests`` requests holding ``tokens`` tokens in all."""
    gbs = cost.cuda_graph_max_bs if graph_max_bs is None else graph_max_bs
    return (
        eager(cost, requests, gbs)
        + cost.floor_ms
        + cost.comm_ms
        + cost.per_request_ms * requests
        + cost.per_token_ms * tokens
        + cost.expert_ms * coverage(cost, tokens)
        + cost.quad_ms * requests * requests
    )


def decode_ms(cost: Cost, batch: int) -> float:
    return forward_ms(cost, batch, batch)


def spec_step_ms(cost: Cost, spec: Spec, batch: int) -> float:
    """num_steps draft forwards (each paying the TP comm), then one verify over batch x draft tokens."""
    gbs = spec.cuda_graph_max_bs or cost.cuda_graph_max_bs
    draft = spec.num_steps * (
        cost.draft_floor_ms
        + cost.comm_ms
        + cost.draft_per_request_ms * batch * spec.eagle_topk
        + eager(cost, batch, gbs)
    )
    verify = forward_ms(cost, batch, batch * spec.num_draft_tokens, gbs)
    # without overlap scheduling the host's per-step work (tree building, sampling, bookkeeping)
    # runs between forwards instead of under them
    cpu = 0.0 if spec.overlap else cost.cpu_ms + cost.cpu_per_request_ms * batch
    return draft + verify + cost.spec_overhead_ms + cpu


def prefill_ms(cost: Cost, tokens: int, speculative: bool) -> float:
    base = cost.prefill_floor_ms + cost.comm_ms + cost.prefill_per_token_ms * tokens
    return base * (cost.spec_prefill_factor if speculative else 1.0)


def max_accept(spec: Spec) -> int:
    """Most drafts one verify can accept: the tree depth, bounded by its size."""
    return min(spec.num_steps, spec.num_draft_tokens - 1)


def branches(spec: Spec) -> float:
    """Draft branches per tree depth: topk, but the verified tree holds only num_draft_tokens − 1
    drafts, so a small tree spread over its depth has fewer (topk=4 with 4 draft tokens over 3
    steps is about one per depth: a chain)."""
    if spec.tree_branches:
        return max(1.0, spec.tree_branches)
    depth = max(1, max_accept(spec))
    return max(1.0, min(float(max(1, spec.eagle_topk)), (spec.num_draft_tokens - 1) / depth))


def per_depth_prob(spec: Spec, p: float) -> float:
    """With b branches per depth, a depth is accepted if any branch matches."""
    b = branches(spec)
    return p if b == 1.0 else 1.0 - (1.0 - p) ** b


def accept_distribution(spec: Spec, p: float) -> list[float]:
    """P(exactly k drafts accepted) for k = 0..max: a chain stops at its first miss."""
    n = max_accept(spec)
    q = per_depth_prob(spec, p)
    probs = [(q**k) * (1.0 - q) for k in range(n)]
    probs.append(q**n)
    return probs


def mean_tokens_per_step(spec: Spec, p: float) -> float:
    """Expected accept length: 1 bonus token + accepted drafts."""
    return 1.0 + sum(k * pk for k, pk in enumerate(accept_distribution(spec, p)))


@lru_cache(maxsize=256)
def _expected_steps(dist: tuple[float, ...], tokens: int) -> float:
    """Expected verify steps to produce ``tokens`` tokens when a step yields 1+k w.p. dist[k]."""
    e = [0.0] * (tokens + 1)
    for m in range(1, tokens + 1):
        e[m] = 1.0 + sum(pk * e[max(0, m - 1 - k)] for k, pk in enumerate(dist))
    return e[tokens]


@dataclass(frozen=True)
class SteadyState:
    batch: int
    step_ms: float
    tokens_per_step: float
    throughput: float
    """Aggregate output tokens/s at time-scale 1."""


def steady_state(
    profile: Profile | str,
    mode: str,
    concurrency: int,
    *,
    prompt_tokens: int = 30,
    output_tokens: int = 200,
    accept: float | None = None,
    adaptive: bool = False,
    max_running: int | None = None,
) -> SteadyState:
    """Closed loop of ``concurrency`` users, each sending the next request as soon as one ends.

    The first token comes from the prefill forward, the rest from decode (or
    verify) steps over a running batch of min(C, cap); requests beyond the cap
    wait, so the batch stays full. Baseline requests of equal length finish
    together and are prefilled in one forward per round; speculative ones drift
    apart (random acceptance), so their prefills are spread over the round.
    """
    if isinstance(profile, str):
        profile = profiles.load(profile)
    profile = profile.for_mode(mode)
    cost = profile.cost
    cap = max_running or profile.max_running(mode)
    batch = max(1, min(concurrency, cap))
    p = profile.acceptance.chat if accept is None else accept
    spec_mode = profile.is_speculative(mode)
    adaptive = adaptive or profile.is_adaptive(mode)
    speculative = spec_mode and not (adaptive and batch >= profile.spec.adaptive_off_batch)
    if speculative:
        dist = tuple(accept_distribution(profile.spec, p))
        step = spec_step_ms(cost, profile.spec, batch)
    else:
        dist = (1.0,)
        step = decode_ms(cost, batch)
    steps = _expected_steps(dist, max(0, output_tokens - 1))
    if speculative and steps > 0:
        forwards = steps * (1.0 - math.exp(-batch / steps))
    else:
        forwards = 1.0
    pf = prefill_ms(cost, 0, spec_mode) * forwards + (
        prefill_ms(cost, batch * prompt_tokens, spec_mode) - prefill_ms(cost, 0, spec_mode)
    )
    cycle_ms = steps * step + pf
    thr = batch * output_tokens / cycle_ms * 1000.0
    tps = (output_tokens - 1) / steps if steps else 1.0
    return SteadyState(batch=batch, step_ms=step, tokens_per_step=tps, throughput=thr)


def expected_throughput(profile: Profile | str, mode: str, concurrency: int, **kw) -> float:
    """Analytic aggregate output tokens/s (time-scale 1) of a closed loop of ``concurrency`` users."""
    return steady_state(profile, mode, concurrency, **kw).throughput


@dataclass(frozen=True)
class Crossover:
    concurrency: float
    """Where spec and baseline throughput are equal (interpolated between integers)."""
    spec_wins_above: bool
    """True if speculation is the faster mode just above this concurrency."""


def true_crossovers(profile: Profile | str, *, max_concurrency: int = 512, **kw) -> list[Crossover]:
    """Every concurrency where the sign of (spec - baseline) throughput flips (a profile or its name)."""
    if isinstance(profile, str):
        profile = profiles.load(profile)
    out: list[Crossover] = []
    prev, prev_c = 0.0, 0
    for c in range(1, max_concurrency + 1):
        diff = expected_throughput(profile, "spec", c, **kw) - expected_throughput(profile, "baseline", c, **kw)
        if diff == 0.0:
            continue
        if prev and (prev < 0) != (diff < 0):
            at = prev_c + (c - prev_c) * prev / (prev - diff)
            out.append(Crossover(concurrency=at, spec_wins_above=diff > 0))
        prev, prev_c = diff, c
    return out
