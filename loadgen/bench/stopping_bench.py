"""How often does a load point that stops when its comparison is over end wrong, and how soon does it end?
(``loadgen bench stopping``)

Each comparison is two targets at one concurrency whose true relative difference Δ is known: both are the
simulator's scheduler in virtual time, its speculative mode (loadgen.sim.virtual.simulated_windows: a stage's steady window cut into
2 s bins, each pass a fresh seeded stage), the same mode, the second's windows scaled by 1 + Δ. A point is
looked at after each pass, at most ``--looks`` passes, its interval at the sequential level
(loadgen.analysis.sequential: 1 − α/looks), and stops at the first look that decides it or calls a tie. Beside
it, the fixed design: every pass run, one look at the run's level (1 − α) — today's ``--repeat``.

Printed per Δ: how often the point ended with the right winner, a wrong winner (any winner when Δ = 0), a tie
(a false one when |Δ| exceeds ``--tie``), still open, and the mean seconds each target ran. A wrong winner is at
most α/2 by the method, a false tie at most α.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from loadgen.analysis.comparison import compare_stage
from loadgen.analysis.results import StageSamples
from loadgen.analysis.sequential import DECIDED, OPEN, TIED, ending, look_level

ONE, SEQUENTIAL, FIXED = "one pass", "sequential", "every pass"
DELTAS = (0.0, 0.01, -0.01, 0.02, -0.02, 0.05, -0.05, 0.20, -0.20)
PROFILE = "pcie-8gpu-eagle3"


@dataclass
class Tally:
    right: int = 0
    wrong: int = 0
    tie: int = 0
    false_tie: int = 0
    open: int = 0
    seconds: float = 0.0
    n: int = 0

    def add(self, kind: str, winner: str, delta: float, tie: float, seconds: float) -> None:
        self.n += 1
        self.seconds += seconds
        if kind == DECIDED:
            good = "spec" if delta > 0 else "baseline" if delta < 0 else None
            if winner == good:
                self.right += 1
            else:
                self.wrong += 1
        elif kind == TIED:
            self.tie += 1
            self.false_tie += abs(delta) > tie
        else:
            self.open += 1

    def cells(self) -> list[str]:
        pct = lambda k: f"{100.0 * k / self.n:5.1f}"  # noqa: E731
        return [pct(self.right), pct(self.wrong), pct(self.tie), pct(self.false_tie), pct(self.open),
                f"{self.seconds / self.n:6.1f}"]


MIXES = 16
"""Request mixes (each pass its own prompts, as a run's passes have: run/order.prompt_seed), drawn once: a mix
takes 0.13 s to plan, a pass of the scheduler a few ms."""


def _pass(seed: int, mix: int, concurrency: int, windows: int, window_s: float, mixes: list) -> list[float]:
    """One target's pass: its own acceptance draws (``seed``), the pass's prompts (``mix``, the same for both
    targets of a pass, as a run gives them: with each target on its own half of the mixes, +1 % read as -0.4 %)."""
    from loadgen.sim.virtual import simulated_windows

    # the speculative mode: its acceptance draws make the windows vary (2-3 % at C=10); the baseline's are
    # the same to the token in virtual time
    return simulated_windows(PROFILE, "spec", concurrency, window_s=window_s, n=windows, warmup_s=10.0,
                             mix=mixes[mix % len(mixes)], seed=seed)


def one(seed: int, delta: float, a: argparse.Namespace, mixes: list) -> dict[str, tuple[str, str, float]]:
    """Design → (ending kind, winner, seconds a target ran) of comparison ``seed``."""
    base: list[float] = []
    spec: list[float] = []
    out: dict[str, tuple[str, str, float]] = {}
    level = look_level(a.confidence, a.looks)
    pass_s = a.windows * a.window

    def judged(confidence: float):
        e = ending(compare_stage(StageSamples(a.concurrency, base, True), StageSamples(a.concurrency, spec, True),
                                 confidence=confidence, seed=seed, tie_margin=a.tie, n_boot=a.n_boot))
        return e.kind, e.winner

    for k in range(a.looks):
        base += _pass(2 * (seed * 100 + k), seed * 7 + k, a.concurrency, a.windows, a.window, mixes)
        spec += [x * (1.0 + delta) for x in _pass(2 * (seed * 100 + k) + 1, seed * 7 + k, a.concurrency, a.windows,
                                                     a.window, mixes)]
        if k == 0:
            out[ONE] = (*judged(a.confidence), pass_s)
        if SEQUENTIAL not in out:
            kind, who = judged(level)
            if kind != OPEN or k + 1 == a.looks:
                out[SEQUENTIAL] = (kind, who, (k + 1) * pass_s)
    out[FIXED] = (*judged(a.confidence), a.looks * pass_s)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="loadgen bench stopping", description=__doc__.split("\n")[0])
    ap.add_argument("--comparisons", type=int, default=200, help="seeded comparisons per Δ (default 200)")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--looks", type=int, default=4, help="passes planned, a look after each (default 4)")
    ap.add_argument("--windows", type=int, default=4, help="2 s windows per pass (default 4: an 8 s window)")
    ap.add_argument("--window", type=float, default=2.0, help="seconds per window (default 2)")
    ap.add_argument("--confidence", type=float, default=0.90)
    ap.add_argument("--tie", type=float, default=0.05, help="the tie margin, a fraction (default 0.05)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--workload", default="chat")
    a = ap.parse_args(argv)
    if a.comparisons < 1 or a.looks < 1 or a.windows < 2 or not 0 < a.confidence < 1 or not 0 < a.tie <= 0.5:
        print("loadgen bench stopping: --comparisons, --looks >= 1, --windows >= 2, --confidence in (0, 1), "
              "--tie in (0, 0.5]", file=sys.stderr)
        return 2
    from loadgen.sim.virtual import workload_mix

    mixes = [workload_mix(PROFILE, a.workload, n=300, seed=i) for i in range(MIXES)]
    t0 = time.monotonic()
    alpha = 1 - a.confidence
    print(f"C={a.concurrency}, {a.workload}, up to {a.looks} passes of {a.windows} × {a.window:g} s windows per target, "
          f"α = {alpha:g}, tie margin ±{a.tie * 100:g} %, {a.comparisons} seeded comparisons per Δ")
    tallies = {d: {x: Tally() for x in DELTAS} for d in (ONE, SEQUENTIAL, FIXED)}
    for delta in DELTAS:
        for seed in range(a.comparisons):
            for design, (kind, who, secs) in one(seed, delta, a, mixes).items():
                tallies[design][delta].add(kind, who, delta, a.tie, secs)
    head = ["right %", "wrong %", "tie %", "false tie %", "open %", "mean s"]
    for design, what in ((ONE, f"one pass, one look at {a.confidence:g} (today's fixed window)"),
                         (SEQUENTIAL, f"a look after each pass at {look_level(a.confidence, a.looks):.4f}, "
                                      f"stop when over (at most {a.looks})"),
                         (FIXED, f"all {a.looks} passes, one look at {a.confidence:g}")):
        print(f"\n{design}: {what}")
        print(f"{'Δ %':>6}  " + "  ".join(f"{h:>11}" for h in head))
        total = Tally()
        for delta, t in tallies[design].items():
            print(f"{delta * 100:+6.0f}  " + "  ".join(f"{x:>11}" for x in t.cells()))
            for f in ("right", "wrong", "tie", "false_tie", "open", "seconds", "n"):
                setattr(total, f, getattr(total, f) + getattr(t, f))
        print(f"{'all':>6}  " + "  ".join(f"{x:>11}" for x in total.cells()))
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
