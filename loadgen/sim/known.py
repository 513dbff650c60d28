"""The embedded simulator's own crossover for a run's traffic, to print beside the one loadgen found.

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

from loadgen.sim.virtual import simulated_crossovers, workload_mix


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


def known_crossovers(sim: dict, workload: str, crossovers: list[dict], *, seed: int = 0,
                     forwards: int = 12000) -> list[KnownCrossover]:
    """The simulator's crossover near each reported one (dicts as in crossover.json).

    ``sim``: the run's ``simulator`` block (profile, seed, protocol, lengths).
    """
    from loadgen.workloads import Lengths

    lengths = Lengths.parse(sim.get("prompt_tokens"), sim.get("max_tokens"), sim.get("tokenizer"),
                            bool(sim.get("ignore_eos")))
    mix = workload_mix(sim["profile"], workload, seed=seed, lengths=lengths,
                       protocol=sim.get("protocol", "sglang"), sim_seed=sim.get("seed", seed))
    out = []
    for x in crossovers:
        low = min(x["ci_low"], x.get("low_c", x["ci_low"]))
        high = max(x["ci_high"], x.get("high_c", x["ci_high"]))
        grid = _grid(low, high)
        found = simulated_crossovers(sim["profile"], grid, mix=mix, forwards=forwards,
                                     warmup_forwards=forwards // 10)
        true = min((f.concurrency for f in found), key=lambda c: abs(c - x["estimate"]), default=None)
        covered = true is not None and x["ci_low"] <= true <= x["ci_high"]
        out.append(KnownCrossover(x["estimate"], true, covered, (grid[0], grid[-1])))
    return out


def verdict(k: dict) -> tuple[str, str]:
    """(✓ or ✗, a sentence) for one KnownCrossover as stored in crossover.json; the terminal and the report say it."""
    if k["true"] is None:
        return "✗", (f"the simulator itself has no crossover between C={k['searched'][0]} and {k['searched'][1]}: "
                     f"C≈{k['reported']:.1f} is a false alarm")
    where = "inside" if k["covered"] else "outside"
    return ("✓" if k["covered"] else "✗"), (f"the simulator's own crossover for this traffic: C={k['true']:.1f} "
                                            f"({where} the reported interval)")
