"""The crossover the simulator really has when driven over HTTP, from its own token counter.

``sim.virtual`` runs the scheduler in virtual time: the model's exact steady
state. This measures the same thing live instead, independently of loadgen's
own figures: long stages at a few concurrencies around the expected
crossover, throughput from the simulator's ``generated_tokens`` counter
(``/server_info``) sampled twice a second, the relative difference fitted
linearly against log concurrency, and the zero of the fit taken, with its 90 %
interval from the fit's residuals.

It is a cross-check of the virtual truth, not a replacement: near a crossover
the difference changes by well under a percent per unit of concurrency, about
what one stage's figure varies. It found the one real disagreement so far:
with equal output lengths the virtual users started in lock-step and shared
their prefills, the live ones (spread by the stage's ramp) did not, and the
virtual baseline ran 1.1-2.3 % faster than the live one (now fixed; see
``sim.virtual``). With the bench's varied lengths the two agree within 0.1 %
(baseline) and 0.5 % (speculative).
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request

import orjson

from loadgen.bench.procs import pinned
from loadgen.run.processes import run_stage_processes
from loadgen.run.spec import RunOptions
from loadgen.run.ramp import warmed_spec
from loadgen.sim.process import SimProcess
from loadgen.client.target import Target


def _counter(url: str) -> tuple[int, int]:
    with urllib.request.urlopen(url + "/server_info", timeout=5) as r:
        info = orjson.loads(r.read())["loadgen_sim"]
    return info["now_ns"], info["generated_tokens"]


def server_throughput(profile: str, mode: str, concurrency: int, source, *, time_scale: float, seed: int,
                      duration_s: float, warmup_s: float = 4.0, e2e_s: float = 1.0) -> float:
    """Output tokens per second of wall time over a stage's window, by the simulator's count."""
    samples: list[tuple[int, int]] = []
    stop = threading.Event()
    with SimProcess(profile=profile, mode=mode, time_scale=time_scale, seed=seed, cpu=0) as sim:
        def sample() -> None:
            while not stop.wait(0.5):
                try:
                    samples.append(_counter(sim.url))
                except OSError:
                    pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            with pinned(1):
                spec = warmed_spec(concurrency, warmup_s, e2e_s, duration_s=duration_s)
                res = run_stage_processes(Target(mode, sim.url, "sglang"), spec, source, RunOptions(), processes=1)
        finally:
            stop.set()
            sampler.join()
    inside = [s for s in samples if res.window_start_ns <= s[0] <= res.window_end_ns]
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / ((t1 - t0) / 1e9)


def fit_crossover(points: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Zero of a least-squares line through (log C, Δ): (estimate, low, high) of a 90 % interval.

    The interval inverts the fit's prediction band (Fieller-style by scanning
    C): the concurrencies whose fitted Δ is within 1.645 standard errors of 0.
    """
    n = len(points)
    if n < 3:
        return None
    xs = [math.log(c) for c, _ in points]
    ys = [d for _, d in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    icpt = my - slope * mx
    if slope == 0:
        return None
    resid = sum((y - icpt - slope * x) ** 2 for x, y in zip(xs, ys)) / (n - 2)
    x0 = -icpt / slope

    def band(x: float) -> float:
        return 1.645 * math.sqrt(resid * (1 / n + (x - mx) ** 2 / sxx))

    grid = [xs[0] - 1 + k * (xs[-1] - xs[0] + 2) / 2000 for k in range(2001)]
    inside = [x for x in grid if abs(icpt + slope * x) <= band(x)]
    lo, hi = (min(inside), max(inside)) if inside else (x0, x0)
    return math.exp(x0), math.exp(lo), math.exp(hi)


def live_crossover(profile: str, grid: list[int], source, *, time_scale: float, seed: int = 0,
                   duration_s: float = 40.0, log=print) -> dict:
    points = []
    for c in grid:
        b = server_throughput(profile, "baseline", c, source, time_scale=time_scale, seed=seed, duration_s=duration_s)
        s = server_throughput(profile, "spec", c, source, time_scale=time_scale, seed=seed, duration_s=duration_s)
        d = (s - b) / b
        points.append((c, d))
        log(f"  live C={c}: baseline {b:.1f} spec {s:.1f} tok/s (wall), spec {100 * d:+.2f} %")
    fit = fit_crossover(points)
    return {"points": points, "crossover": fit}
