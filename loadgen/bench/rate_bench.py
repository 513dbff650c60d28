"""Does an open-loop run's rate crossover cover the simulator's own, and is its capacity within ±15 %?
(``loadgen bench rates``)

For each seed, ``loadgen crossover --rate …`` runs Poisson arrivals against a fresh pair of
embedded simulators (baseline and spec of pcie-8gpu-eagle3, chat prompts, 150-250 output tokens
with ignore_eos, time-scale 10: a 20 s window holds 200 s of the modelled server), with a capacity
search under TTFT p99 ≤ 500 ms and TPOT p50 ≤ 3 ms (wall ms at time-scale 10: 5 s and 30 ms of the
modelled server; the TPOT limit binds below either target's running cap, where a p99 of TTFT is a
cliff whose place a 20 s window cannot pin, see docs/benchmarks.md). Its rates.json carries the
simulator's own answers in virtual time for the same arrivals (loadgen.cli.ratetruth): each
confirmed crossover of the per-user decode rate, E2E from plan (mean, p50) and TPOT p50 is covered when the truth lies in the
reported interval; each capacity is close when the estimate is within ±15 % of the truth.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SLOS = "ttft_p99=500ms,tpot_p50=3ms"
METRICS = ("decode_rate", "e2e_planned_mean", "tpot_p50", "e2e_planned_p50")


def one_run(seed: int, ladder: str, duration: str, budget: int, time_scale: float = 10.0, slos: str = SLOS,
            keep: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(keep) / f"seed{seed}" if keep else Path(tmp) / "rates"
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "loadgen", "crossover", "--seed", str(seed), "--rate", ladder, "--arrival", "poisson",
             "--workload", "chat", "--max-tokens", "uniform:150,250", "--ignore-eos", "--duration", duration,
             "--warmup", "2s", "--capacity", slos, "--capacity-budget", str(budget), "--sim-time-scale", str(time_scale),
             "--out", str(out), "--no-report"],
            capture_output=True, text=True)
        if p.returncode != 0:
            return {"seed": seed, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        res = json.loads((out / "rates.json").read_text())
    row: dict = {"seed": seed, "seconds": round(time.monotonic() - t0), "crossovers": {}, "capacity": {}}
    per = res["metrics"]["chat"]["spec"]
    for name in METRICS:
        xs = per.get(name, {}).get("analysis", {}).get("crossovers", [])
        truth = per.get(name, {}).get("simulator_truth", [])
        row["crossovers"][name] = [{"estimate": x["estimate"], "ci": [x["ci_low"], x["ci_high"]],
                                    "true": t.get("true"), "covered": t.get("covered")} for x, t in zip(xs, truth)]
    for label, c in res.get("capacity", {}).get("chat", {}).items():
        row["capacity"][label] = {"estimate": c.get("estimate"), "ci": [c.get("ci_low"), c.get("ci_high")],
                                  "true": c.get("truth"),
                                  "err": (c["estimate"] / c["truth"] - 1) if c.get("estimate") and c.get("truth")
                                  else None}
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="loadgen bench rates", description=__doc__)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--ladder", default="5,10,20,27,32", help="wall req/s at --time-scale (default 5,10,20,27,32)")
    p.add_argument("--duration", default="20s")
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--slos", default=SLOS)
    p.add_argument("--capacity-budget", type=int, default=1)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--keep", help="keep each seed's results folder under this one")
    a = p.parse_args(argv)
    rows = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        row = one_run(seed, a.ladder, a.duration, a.capacity_budget, a.time_scale, a.slos, a.keep)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
    print("\nmetric            seeds  confirmed  covered")
    for name in METRICS:
        found = [r["crossovers"][name] for r in rows if "error" not in r]
        conf = sum(1 for xs in found if xs)
        cov = sum(1 for xs in found if xs and all(x["covered"] for x in xs))
        print(f"{name:16s}  {len(found):5d}  {conf:9d}  {cov:7d}")
    for label in ("baseline", "spec"):
        errs = [r["capacity"][label]["err"] for r in rows if "error" not in r and r["capacity"].get(label)
                and r["capacity"][label]["err"] is not None]
        close = sum(1 for e in errs if abs(e) <= 0.15)
        print(f"capacity {label}: within ±15 % in {close} of {len(errs)} seeds; errors "
              + ", ".join(f"{e * 100:+.0f} %" for e in errs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
