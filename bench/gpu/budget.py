#!/usr/bin/env python3
"""Will the ladder fit its budget? Replays loadgen's per-stage budget sharing on assumed server speeds.

    python3 bench/gpu/budget.py [--max-run-time 900] [--max-stage-time 90] [--tokens 64] [--duration 10]

`loadgen crossover --max-run-time` gives each stage the share of the time left that its estimate is of the
stages left (loadgen/ramp.py), and a stage cut by its share ends the run. The estimates come from the E2E p50
of lower stages scaled by C/C' (Little's law), which overshoots on a server whose total tok/s grows with C
(llama.cpp with --backend-sampling: ~250 tok/s at C=64, 1,258 at C=256 on the H200), and a stage with an
overshooting estimate is capped at --max-stage-time. So the sum of the estimates can exceed the time left
while the real stages are shorter, every share shrinks, and a stage that runs a little over its share stops
the whole run early. This replays that with a simple model of a stage (warm-up: the ramp over one request
plus two steadiness spans of a quarter request, 1-10 s, at least --warmup, capped as loadgen caps it; the
window; a cool-down of one request) for three guesses of the server's total output tok/s by C (from
../shared/research/gpu-llama-cpp.md), and prints where each scenario ends. It is a planning aid: the stage
model is an assumption, not a measurement; the real run prints its own estimate before its first stage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loadgen.ramp import _Durations, warmed_spec  # noqa: E402

LADDER = [1, 4, 16, 64, 256]
WORKLOADS = ["predictable", "freetext"]
TARGETS = ["baseline", "spec"]
# total output tok/s by concurrency (the H200 facts: 250-590 tok/s from C=1 to 256 without backend sampling,
# 1,258 at C=256 with it, 104-494 at C=1-64)
FAST = {1: 300, 4: 300, 16: 275, 64: 250, 256: 1000}
SLOW_OPEN_TEXT = {1: 110, 4: 110, 16: 110, 64: 250, 256: 600}
PESSIMISTIC = {1: 250, 4: 250, 16: 220, 64: 200, 256: 530}
SCENARIOS = {  # workload -> total tok/s by C
    "as measured, --backend-sampling": {"predictable": FAST, "freetext": FAST},
    "freetext slower (temperature > 0)": {"predictable": FAST, "freetext": SLOW_OPEN_TEXT},
    "both slow": {"predictable": SLOW_OPEN_TEXT, "freetext": SLOW_OPEN_TEXT},
    "pessimistic": {"predictable": PESSIMISTIC, "freetext": PESSIMISTIC},
}


def replay(speed: dict[str, dict[int, float]], *, budget: float, max_stage: float, tokens: float, duration: float,
           warmup: float, start_s: float = 15.0, ttft_s: float = 0.05, verbose: bool = False) -> tuple[int, float, bool]:
    stages = [(w, c, t) for t in TARGETS for w in WORKLOADS for c in LADDER]
    durations = _Durations()
    t = 0.0

    def spec_for(i: int, b: float | None):
        w, c, tg = stages[i]
        return warmed_spec(c, warmup, durations.guess(tg, w, c), duration_s=duration, max_stage_s=b)

    for i, (w, c, tg) in enumerate(stages):
        if i == 0 or stages[i - 1][2] != tg:
            t += start_s  # the server's start (model load, KV cache)
        left = budget - t
        if left <= 1.0:
            return i, t, True
        rest = [spec_for(j, max_stage).estimate_s() for j in range(i, len(stages))]
        share = left * rest[0] / sum(rest)
        b, by = (max(1.0, share), "run") if share < max_stage else (max_stage, "stage")
        d = c * tokens / speed[w][c] + ttft_s
        sp = spec_for(i, b)
        warm = min(sp.max_warmup_s or 1e9, max(warmup, (d if c > 1 else 0.0) + 2 * min(max(d / 4, 1.0), 10.0)))
        took = warm + duration + d
        cut = took > b
        t += min(took, b)
        if verbose:
            print(f"  {tg:8s} {w:11s} C={c:3d} request {d:5.1f} s, estimate {rest[0]:5.1f} s, budget {b:5.1f} s "
                  f"({by}), takes {min(took, b):5.1f} s, at {t:4.0f} s" + ("  CUT" if cut else ""))
        if cut and by == "run":
            return i + 1, t, True
        if not cut:
            durations.add(tg, w, c, d)
    return len(stages), t, False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-run-time", type=float, default=1000.0)
    ap.add_argument("--max-stage-time", type=float, default=90.0)
    ap.add_argument("--tokens", type=float, default=64.0, help="mean output tokens per request")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    ok = True
    for name, speed in SCENARIOS.items():
        print(f"{name}:")
        n, t, stopped = replay(speed, budget=a.max_run_time, max_stage=a.max_stage_time, tokens=a.tokens,
                               duration=a.duration, warmup=a.warmup, verbose=a.verbose)
        print(f"  {n} of 20 stages, {t:.0f} s" + ("  <-- STOPPED EARLY by --max-run-time" if stopped else ""))
        ok &= not stopped
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
