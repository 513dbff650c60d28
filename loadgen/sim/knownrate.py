"""The embedded simulator's own answers on the rate axis, to print beside what loadgen measured.

In: a run's ``simulator`` block (profile, seed, protocol, lengths, time scale), a workload, and what
the rate-axis analysis reported: rate crossovers of a latency metric, a capacity under SLOs, a
saturation rate. Out: the simulator's steady-state answer in virtual time (``openloop.rate_truth``
with ``long_run``), every rate in WALL requests/s at the run's time scale, as loadgen sent them:
``known_rate_crossovers`` → :class:`KnownRateCrossover` per reported one, ``known_capacity`` and
``known_saturation`` → a rate or None, ``closed_form_capacity`` → the closed loop's best
throughput over mean output length, the sanity check on ``known_saturation``.

As ``known.py`` does for concurrency: the simulator knows its cost model, so for the requests the
run sent (same workload, lengths, seeds, protocol, arrival process) it computes where the two
modes' latency curves cross and how fast each can go, and a reader sees whether the reported
interval covers it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.errors import LoadgenError
from loadgen.sim import model, profiles
from loadgen.sim.known import _mix
from loadgen.sim.openloop import LONG_RUN_REQUESTS, METRICS, RateTruth, rate_truth
from loadgen.sim.virtual import sign_changes, simulated_throughput


@dataclass(frozen=True)
class KnownRateCrossover:
    reported: float
    """The rate crossover the analysis estimated (wall req/s)."""
    true: float | None
    """The simulator's own crossover nearest it, or None when it has none in the searched span."""
    covered: bool
    searched: tuple[float, float]
    """The rates searched: the reported interval and its bracketing stages."""


def _truth(sim: dict, mix, mode: str, rate: float, arrival: str, seed: int, requests: int,
           memo: dict | None = None) -> RateTruth:
    """``seed``: the run's: run/pacing.py draws the arrivals from it (keyed by rate too), and the mix.
    ``memo``: truths already computed for this simulator, mix, arrival, seed and requests, by (mode, rate):
    the metrics of one run search the same rates, and each truth is seconds of the scheduler."""
    if memo is not None and (mode, rate) in memo:
        return memo[(mode, rate)]
    t = rate_truth(sim["profile"], mode, rate, mix=mix, arrival=arrival, seed=seed,
                   time_scale=float(sim.get("time_scale", 1.0)), long_run=True, requests=requests,
                   max_running=int(sim.get("max_running") or 0), max_queued=sim.get("max_queued"))
    if memo is not None:
        memo[(mode, rate)] = t
    return t


def known_rate_metric(sim: dict, workload: str, mode: str, rate: float, metric: str, *, arrival: str = "poisson",
                      seed: int = 0, warmup_s: float, window_s: float, memo: dict | None = None) -> float | None:
    """One mode's ``metric`` (sim.openloop.METRICS) at ``rate`` (wall req/s) over the window the run measured:
    the very schedule it sent (its seed, arrivals, warm-up and window), not the arrival process's long run. An
    interval over a window's bins is conditional on that window's arrivals: a bursty schedule of a hundred
    requests is its own luck (an adaptive mode 3.8 % behind spec in the long run at 16 req/s gamma:2 was level
    with it on a 6 s window that held fewer bursts)."""
    _check_metric(metric)
    memo = {} if memo is None else memo
    if "mix" not in memo:
        memo["mix"] = _mix(sim, workload, seed)
    key = (mode, rate, warmup_s, window_s)
    if key not in memo:
        memo[key] = rate_truth(sim["profile"], mode, rate, mix=memo["mix"], arrival=arrival, seed=seed,
                               time_scale=float(sim.get("time_scale", 1.0)), warmup_s=warmup_s, window_s=window_s,
                               max_running=int(sim.get("max_running") or 0), max_queued=sim.get("max_queued"))
    return memo[key].metric(metric)


def rate_grid(low: float, high: float, points: int = 9) -> list[float]:
    """``points`` rates evenly spaced on log rate over [low, high]."""
    if not (low > 0 and high > low):
        raise LoadgenError(f"a rate span needs 0 < low < high, got {low:g} … {high:g} req/s")
    return [math.exp(math.log(low) + k * (math.log(high) - math.log(low)) / (points - 1)) for k in range(points)]


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise LoadgenError(f"unknown rate metric {metric!r}; known: {', '.join(METRICS)}")


def rate_differences(sim: dict, mix, metric: str, rates: list[float], modes: tuple[str, str], arrival: str,
                     seed: int, requests: int, memo: dict | None = None) -> list[tuple[float, float]]:
    """(rate, (to − from) / from of ``metric``) where both modes have it; lower is better, so a negative
    difference is ``to`` winning."""
    out = []
    for r in rates:
        a = _truth(sim, mix, modes[0], r, arrival, seed, requests, memo).metric(metric)
        b = _truth(sim, mix, modes[1], r, arrival, seed, requests, memo).metric(metric)
        if a and b is not None:
            out.append((r, (b - a) / a))
    return out


def known_rate_crossovers(sim: dict, workload: str, metric: str, crossovers: list[dict], *,
                          modes: tuple[str, str] = ("baseline", "spec"), arrival: str = "poisson", seed: int = 0,
                          points: int = 9, requests: int = LONG_RUN_REQUESTS,
                          memo: dict | None = None) -> list[KnownRateCrossover]:
    """The simulator's crossover of ``metric`` (a :data:`openloop.METRICS` name, lower is better) nearest
    each reported one: where the modes' long-run difference changes sign on ``points`` rates over the
    reported interval and its bracketing stages (``estimate``, ``ci_low``, ``ci_high``, ``low_c``,
    ``high_c``, in wall req/s), interpolated on log rate. ``memo``: shared by the calls of one run and
    workload (:func:`_truth`)."""
    _check_metric(metric)
    profiles.load(sim["profile"]).check_modes(list(modes), "rate crossover truth")
    mix = _mix(sim, workload, seed)
    out = []
    for x in crossovers:
        low = min(x["ci_low"], x.get("low_c", x["ci_low"]))
        high = max(x["ci_high"], x.get("high_c", x["ci_high"]))
        grid = rate_grid(low, high, points)
        diffs = rate_differences(sim, mix, metric, grid, modes, arrival, seed, requests, memo)
        found = sign_changes([r for r, _ in diffs], [d for _, d in diffs])
        true = min((f.concurrency for f in found), key=lambda r: abs(r - x["estimate"]), default=None)
        out.append(KnownRateCrossover(x["estimate"], true, true is not None and x["ci_low"] <= true <= x["ci_high"],
                                      (grid[0], grid[-1])))
    return out


def _bisect(ok, lo: float, hi: float, rel: float) -> float:
    """The highest rate where ``ok`` holds, given ok(lo) and not ok(hi), to ``rel`` on log rate."""
    while hi / lo > 1.0 + rel:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def meets(t: RateTruth, slos: list[tuple[str, float]]) -> bool:
    """Sustained (not saturated) and every (metric, limit ms) met; a metric without samples (TPOT of
    one-token answers) meets any limit, as loadgen's SLO check has it."""
    if t.saturated:
        return False
    return all((v := t.metric(m)) is None or v <= limit for m, limit in slos)


def known_capacity(sim: dict, workload: str, mode: str, slos: list[tuple[str, float]], *, lo: float, hi: float,
                   arrival: str = "poisson", seed: int = 0, rel: float = 0.01,
                   requests: int = LONG_RUN_REQUESTS, memo: dict | None = None) -> float | None:
    """The highest wall rate in [lo, hi] whose long-run truth is sustained and meets every SLO
    ``(metric, limit_ms)``, by bisection on log rate to ``rel``; ``hi`` when it passes, None when even
    ``lo`` fails."""
    for m, _ in slos:
        _check_metric(m)
    rate_grid(lo, hi, 2)
    profiles.load(sim["profile"]).check_modes([mode], "capacity truth")
    mix = _mix(sim, workload, seed)

    def ok(r: float) -> bool:
        return meets(_truth(sim, mix, mode, r, arrival, seed, requests, memo), slos)

    if not ok(lo):
        return None
    if ok(hi):
        return hi
    return _bisect(ok, lo, hi, rel)


def known_saturation(sim: dict, workload: str, mode: str, lo: float, hi: float, *, arrival: str = "poisson",
                     seed: int = 0, rel: float = 0.01, requests: int = LONG_RUN_REQUESTS) -> float | None:
    """The wall rate in [lo, hi] where the mode's long-run truth starts falling behind (``saturated``), by
    bisection on log rate to ``rel``: the highest rate still sustained. None when ``lo`` is already
    saturated or ``hi`` is not."""
    rate_grid(lo, hi, 2)
    profiles.load(sim["profile"]).check_modes([mode], "saturation truth")
    mix = _mix(sim, workload, seed)

    def ok(r: float) -> bool:
        return not _truth(sim, mix, mode, r, arrival, seed, requests).saturated

    if not ok(lo) or ok(hi):
        return None
    return _bisect(ok, lo, hi, rel)


def closed_form_capacity(sim: dict, workload: str, mode: str, *, seed: int = 0, forwards: int = 6000) -> float:
    """Wall req/s a full server sustains: the closed loop's best output tok/s (``simulated_throughput`` at
    the batch the analytic model finds best, at most the mode's cap) over the mix's mean output length,
    × the time scale. An open loop saturates at or a little below it: Poisson bursts push a batch whose
    throughput falls past its best (baseline here) over the top, and every arrival pauses the batch
    for its own prefill."""
    prof = profiles.load(sim["profile"])
    prof.check_modes([mode], "capacity")
    mix = _mix(sim, workload, seed)
    n_prompt = round(sum(m[0] for m in mix) / len(mix))
    n_out = sum(m[2] for m in mix) / len(mix)
    p = sum(m[1] for m in mix) / len(mix)
    cap = prof.max_running(mode)
    best = max(range(1, cap + 1), key=lambda c: model.expected_throughput(
        prof, mode, c, prompt_tokens=n_prompt, output_tokens=round(n_out), accept=p))
    tps = simulated_throughput(prof, mode, best, mix=mix, forwards=forwards, warmup_forwards=forwards // 10, seed=seed)
    return tps / n_out * float(sim.get("time_scale", 1.0))
