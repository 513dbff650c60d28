"""Is a thrashing threshold flagged, and one with hysteresis not, under bursty open load? (``loadgen bench
switching``)

Each run is a ``loadgen crossover`` of the pcie-8gpu-eagle3 profile's naive adaptive mode (speculation off at a
running batch of 48, on again below it) and its hysteresis twin (on again only below 32) against the embedded
simulators, gamma arrivals (CV 3) of predictable text at each rate. Per stage it prints the simulator's own
switches inside the window (``simulator.switching``), the stream's count (``switching``) and whether the stage
was flagged. How many switches a rate makes is the burst schedule's and the host's: measured 7 truth / 6 stream
for the naive mode at 46 req/s with the host busy, 10-11 pinned to a core, the hysteresis mode 1
(2026-12-06, 2 cores); which is why this is a figure and not a test. tests/cli/test_switching_open.py asserts
what holds whatever the speed: a stage is flagged exactly when the truth thrashes, and the stream never counts
more than the truth and one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadgen.stage.switching import NOTE_HEAD

MODES = ("spec-adaptive", "spec-adaptive-hysteresis")


def one_run(rates: str, seed: int, duration: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "xo"
        p = subprocess.run(
            [sys.executable, "-m", "loadgen", "crossover", "--sim-modes", ",".join(MODES), "--rate", rates,
             "--arrival", "gamma:3", "--workload", "predictable", "--duration", duration, "--warmup", "1s",
             "--seed", str(seed), "--past-saturation", "--out", str(out), "--no-report"],
            capture_output=True, text=True)
        if p.returncode != 0:
            return [{"error": (p.stderr.strip().splitlines() or ["?"])[-1]}]
        stages = json.loads((out / "run.json").read_text())["stages"]
    rows = []
    for s in stages:
        truth = (s.get("simulator") or {}).get("switching") or {}
        rows.append({"target": s["target"], "rate": s["rate"], "truth": truth.get("switches"),
                     "stream": (s.get("switching") or {}).get("switches"),
                     "flagged": any(n.startswith(NOTE_HEAD) for n in s["notes"])})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="loadgen bench switching", description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="40,46", help="open-loop rates, req/s (default 40,46)")
    ap.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    ap.add_argument("--duration", default="5s", help="each stage's window (default 5s)")
    args = ap.parse_args(argv)
    print(f"{'seed':>4}  {'target':<26}{'rate':>6}  {'truth':>5}  {'stream':>6}  flagged")
    for seed in (int(x) for x in args.seeds.split(",")):
        t0 = time.monotonic()
        for r in one_run(args.rates, seed, args.duration):
            if "error" in r:
                print(f"{seed:>4}  error: {r['error']}")
                continue
            print(f"{seed:>4}  {r['target']:<26}{r['rate']:>6g}  {str(r['truth']):>5}  {str(r['stream']):>6}  "
                  f"{'yes' if r['flagged'] else 'no'}")
        print(f"      ({time.monotonic() - t0:.0f} s)")
    return 0
