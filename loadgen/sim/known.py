"""The embedded simulator's own crossover for a run's traffic, to print beside the one loadgen found.

In: a run's ``simulator`` block, a workload, what the analysis reported (crossovers, or for N
configurations the switch points of its policy, with the run's labels mapped to simulator modes).
Out: the simulator's own answer in virtual time (``virtual``): KnownCrossover / KnownSwitch per
reported point, ``known_best``'s tok/s per concurrency and label, and ``known_gaps``: an adaptive
configuration's own gap to the envelope of the fixed ones at each measured C (a phase of a
``phases:`` workload is its own workload here: its label resolves to the phase's requests).

A run against the embedded simulators can be checked as it is reported: the
simulator knows its cost model, so ``sim.virtual`` computes the crossover its
scheduler has for the requests this run sent (same workload, lengths, seeds
and protocol), near each crossover the analysis reports. A reader then sees
whether the reported interval covers the truth, on their own machine, without
taking the project's benchmark on trust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.sim.virtual import simulated_crossovers, simulated_throughput, workload_mix


@dataclass(frozen=True)
class KnownCrossover:
    reported: float
    """The crossover the analysis estimated."""
    true: float | None
    """The simulator's own crossover near it, or None when it has none there."""
    covered: bool
    searched: tuple[int, int]
    """The concurrencies searched (the reported interval and its bracketing stages)."""


def _grid(low: float, high: float, points: int = 9) -> list[int]:
    lo, hi = max(1, math.floor(low)), max(2, math.ceil(high))
    if hi - lo + 1 <= points:
        return list(range(lo, hi + 1))
    return sorted({round(math.exp(math.log(lo) + k * (math.log(hi) - math.log(lo)) / (points - 1)))
                   for k in range(points)})


def check_modelled(sim: dict) -> None:
    """The virtual model plans independent requests on a server without a prefix cache: a run whose simulators
    kept one, or whose users held sessions (later turns carry the replies; a shared system prompt lengthens
    every prompt), has no own answer to print (a LoadgenError every caller reports as not available)."""
    from loadgen.errors import LoadgenError

    if sim.get("prefix_cache"):
        raise LoadgenError("the simulators kept a prefix cache (--sim-prefix-cache), which their virtual model "
                           "does not have")
    sessions = sim.get("sessions") or {}
    if sessions.get("turns", 1) > 1 or sessions.get("shared_prefix"):
        raise LoadgenError("the users held sessions (--turns, --shared-prefix), whose requests the virtual model "
                           "does not plan")


def _mix(sim: dict, workload: str, seed: int) -> list[tuple[int, float, int]]:
    """The run's requests as the simulator plans them (same workload, lengths, seeds, protocol)."""
    from loadgen.workloads import Lengths

    check_modelled(sim)
    lengths = Lengths.parse(sim.get("prompt_tokens"), sim.get("max_tokens"), sim.get("tokenizer"),
                            bool(sim.get("ignore_eos")))
    return workload_mix(sim["profile"], workload, seed=seed, lengths=lengths,
                        protocol=sim.get("protocol", "sglang"), sim_seed=sim.get("seed", seed))


def known_crossovers(sim: dict, workload: str, crossovers: list[dict], *, seed: int = 0,
                     forwards: int = 12000) -> list[KnownCrossover]:
    """The simulator's crossover near each reported one (dicts as in crossover.json).

    ``sim``: the run's ``simulator`` block (profile, seed, protocol, lengths).
    """
    mix = _mix(sim, workload, seed)
    return [KnownCrossover(x["estimate"], *_nearest(sim, mix, x, ("baseline", "spec"), forwards))
            for x in crossovers]


def _nearest(sim: dict, mix, x: dict, modes: tuple[str, str], forwards: int) -> tuple[float | None, bool, tuple]:
    """(the simulator's own crossover of ``modes`` nearest the reported ``x``, whether ``x``'s interval
    covers it, the C range searched: the interval and its bracketing stages)."""
    low = min(x["ci_low"], x.get("low_c", x["ci_low"]))
    high = max(x["ci_high"], x.get("high_c", x["ci_high"]))
    grid = _grid(low, high)
    found = simulated_crossovers(sim["profile"], grid, modes=modes, mix=mix, forwards=forwards,
                                 warmup_forwards=forwards // 10)
    true = min((f.concurrency for f in found), key=lambda c: abs(c - x["estimate"]), default=None)
    return true, true is not None and x["ci_low"] <= true <= x["ci_high"], (grid[0], grid[-1])


def _modes_of(sim: dict, modes: dict[str, str], labels) -> None:
    from loadgen.errors import LoadgenError
    from loadgen.sim import profiles

    prof = profiles.load(sim["profile"])
    for label in labels:
        if label not in modes:
            raise LoadgenError(f"no simulator mode for target {label!r} (modes given for: {', '.join(modes) or 'none'})")
        prof.check_modes([modes[label]], f"target {label!r}")


def known_best(sim: dict, workload: str, modes: dict[str, str], concurrencies: list[int], *, seed: int = 0,
               forwards: int = 12000) -> dict[int, dict[str, float]]:
    """Per concurrency, per target label, the simulator's own output tok/s (virtual time, time-scale 1)
    for this run's traffic. ``modes``: the run's target labels → simulator modes."""
    _modes_of(sim, modes, modes)
    mix = _mix(sim, workload, seed)
    return {c: {label: simulated_throughput(sim["profile"], mode, c, mix=mix, forwards=forwards,
                                            warmup_forwards=forwards // 10, seed=seed)
                for label, mode in modes.items()}
            for c in concurrencies}


@dataclass(frozen=True)
class KnownSwitch:
    """The simulator's own switch between two configurations near one the policy reported."""

    reported: float
    """The switch point the analysis estimated."""
    true: float | None
    """Where the simulator's better of the two changes, nearest the estimate; None when it does not
    change over the searched range."""
    covered: bool
    searched: tuple[int, int]
    from_label: str
    to_label: str


def known_switches(sim: dict, workload: str, modes: dict[str, str], switches: list[dict], *, seed: int = 0,
                   forwards: int = 12000) -> list[KnownSwitch]:
    """For each reported switch ``{"from", "to", "estimate", "ci_low", "ci_high", "low_c", "high_c"}``,
    where the simulator's better of those two labels' modes changes, on a grid over the reported
    interval and its bracketing stages."""
    _modes_of(sim, modes, {lab for x in switches for lab in (x["from"], x["to"])})
    mix = _mix(sim, workload, seed)
    return [KnownSwitch(x["estimate"], *_nearest(sim, mix, x, (modes[x["from"]], modes[x["to"]]), forwards),
                        x["from"], x["to"]) for x in switches]


@dataclass(frozen=True)
class KnownGap:
    """An adaptive configuration's gap to the envelope at one C, as reported and as the simulator has it."""

    label: str
    concurrency: int
    reported: float
    """(adaptive − envelope) / envelope, as the analysis estimated it."""
    ci_low: float
    ci_high: float
    true: float
    """The same in the simulator's steady state: the adaptive mode against the best fixed one there."""
    envelope_label: str
    """The simulator's best fixed configuration at this C."""
    covered: bool


def known_gaps(sim: dict, workload: str, modes: dict[str, str], adaptive: list[str], reported: list[dict], *,
               seed: int = 0, forwards: int = 12000) -> list[KnownGap]:
    """Beside each reported gap ``{"label", "concurrency", "delta", "ci_low", "ci_high"}`` of an adaptive
    configuration, the simulator's own: its steady-state tok/s (:func:`known_best`) of that mode against the best
    of the fixed configurations' modes at that C, for this run's traffic."""
    if not reported:
        return []
    cs = sorted({int(g["concurrency"]) for g in reported})
    best = known_best(sim, workload, modes, cs, seed=seed, forwards=forwards)
    out = []
    for g in reported:
        here = best[int(g["concurrency"])]
        fixed = {x: v for x, v in here.items() if x not in adaptive}
        top = max(fixed, key=fixed.__getitem__)
        true = here[g["label"]] / fixed[top] - 1.0
        out.append(KnownGap(g["label"], int(g["concurrency"]), g["delta"], g["ci_low"], g["ci_high"], true, top,
                            g["ci_low"] <= true <= g["ci_high"]))
    return out
