"""The Locust path's timing error against the scripted runner's, both against a server's own send log.

    python bench/bench_locust.py                      # 250 streams, lockstep and staggered
    python bench/bench_locust.py --concurrency 50 --modes lockstep --duration 5

For each schedule, the known-schedule server (loadgen.bench.schedserver, pinned
to CPU 0) is measured by two clients, each pinned to CPU 1, in alternating
rounds (runner, locust; locust, runner; ...):

  runner  ``loadgen run --url ...``           (the scripted asyncio stage runner)
  locust  ``locust -f scenarios/ramp.py --headless --config ...``  (the Locust user via the bridge)

Each writes its usual results file (one stage). The server's log of every
chunk it sent is then folded with the *same* metric code over the *same*
steady window, and "error" = client figure − true figure. Per path, the
median over rounds is compared: the Locust path passes when its ITL p50/p99
errors are within ``--tolerance-ms`` (0.2) of the runner's. Exit status 1 when
it does not.

Output lengths vary (``--max-tokens uniform:30,90``, the same sequence for both
clients): with one fixed length, 250 closed-loop streams finish and restart in
waves of 250 at once, and each wave's burst of sends delays the stamping of
everything else by tens of milliseconds — in both clients, but never at the
same moment of two runs, which would swamp the comparison. On a shared machine,
``--nice -10`` (as root) keeps other tenants' work from dominating.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.bench.procs import schedserver  # noqa: E402
from loadgen.bench.sendlog import truth_record  # noqa: E402
from loadgen.metrics import BY_NAME  # noqa: E402

METRICS = ("itl", "ttft", "chunk_gap")


def truth(url: str) -> dict:
    with urllib.request.urlopen(url + "/truth?clear=1", timeout=30) as r:
        return json.loads(r.read())


def true_summary(log: dict, stage: dict) -> dict:
    """The server's own figures over the stage's window (chunk metrics by send time, TTFT by arrival)."""
    lo, hi = stage["window"]["start_ns"], stage["window"]["end_ns"]
    out = {}
    for name in METRICS:
        m = BY_NAME[name]
        h = m.new_hist()
        for rid, v in log.items():
            rec = truth_record(rid, v["received_ns"], v["sends"])
            if m.level == "request" and not lo <= rec.start_ns < hi:
                continue
            m.observe(rec, h, lo, hi)
        out[name] = h.summary(m.divisor)
    return out


def figures(mode: str, path: str, rnd: int, st: dict, t: dict) -> dict:
    row = {"mode": mode, "path": path, "round": rnd, "concurrency": st["concurrency"],
           "requests": st["requests"]["completed"], "tok_s": st["output_tokens_per_s"],
           "client_bound": st["client"]["client_bound"], "loop_lag_p99_ms": st["client"]["loop_lag_ms"].get("p99"),
           "cpu_pct": (st["client"]["cpu_pct"] or [None])[0]}
    for m in METRICS:
        for q in ("p50", "p99"):
            c, tr = st[m].get(q), t[m].get(q)
            row[f"{m}_{q}"] = c
            row[f"{m}_{q}_true"] = tr
            row[f"{m}_{q}_err"] = round(c - tr, 4) if c is not None and tr is not None else None
    return row


def median_row(mode: str, path: str, rows: list[dict]) -> dict:
    out = {"mode": mode, "path": path, "concurrency": rows[0]["concurrency"]}
    for k in rows[0]:
        if k in out or k in ("round",):
            continue
        vals = [r[k] for r in rows if isinstance(r[k], (int, float)) and not isinstance(r[k], bool)]
        if vals:
            out[k] = statistics.median(vals)
        else:
            out[k] = any(r[k] for r in rows) if isinstance(rows[0][k], bool) else rows[0][k]
    return out


def diff_interval(a: list[float], b: list[float], n: int = 2000, level: float = 0.9) -> tuple[float, float]:
    """Bootstrap interval (over rounds) of median(a) − median(b): how well the rounds pin the difference down."""
    rng = random.Random(0)
    diffs = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(n))
    lo, hi = diffs[int((1 - level) / 2 * n)], diffs[int((1 + level) / 2 * n) - 1]
    return round(lo, 3), round(hi, 3)


def pinned_env_cmd(cmd: list[str], cpu: int | None) -> list[str]:
    return (["taskset", "-c", str(cpu)] + cmd) if cpu is not None else cmd


def run_runner(url: str, a, out: Path, cpu) -> dict:
    cmd = [sys.executable, "-m", "loadgen", "run", "--url", url, "--ladder", str(a.concurrency),
           "--duration", f"{a.duration}s", "--warmup", f"{a.warmup}s", "--max-tokens", str(a.max_tokens),
           "--label", "runner", "--out", str(out)]
    subprocess.run(pinned_env_cmd(cmd, cpu), check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return json.loads((out / "run.json").read_text())["stages"][0]


def run_locust(url: str, a, folder: Path, cpu) -> dict:
    cfg = folder / "bench.toml"
    cfg.write_text(
        f'[run]\nladder = [{a.concurrency}]\nwarmup = {a.warmup}\nduration = {a.duration}\n'
        f'max_tokens = "{a.max_tokens}"\nout = "{folder / "locust"}"\n\n'
        f'[targets.locust]\nurl = "{url}"\nprotocol = "sglang"\n'
    )
    cmd = ["locust", "-f", str(ROOT / "scenarios" / "ramp.py"), "--headless", "--config", str(cfg),
           "--only-summary", "--loglevel", "WARNING"]
    subprocess.run(pinned_env_cmd(cmd, cpu), check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return json.loads((folder / "locust" / "ramp.json").read_text())["stages"][0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=250)
    p.add_argument("--modes", default="lockstep,staggered")
    p.add_argument("--interval-ms", type=float, default=100.0, help="server step / per-stream chunk interval")
    p.add_argument("--ttft-ms", type=float, default=30.0)
    p.add_argument("--tokens", default="1,3,2,4", help="tokens per chunk pattern")
    p.add_argument("--max-tokens", default="uniform:30,90", help="output length: N, uniform:LO,HI, normal:M,S")
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--nice", type=int, default=0, help="renice this benchmark (and its children) by N first")
    p.add_argument("--compare", choices=("locust", "runner"), default="locust",
                   help="what to hold against the runner; 'runner' (an A/A run) measures the noise floor")
    p.add_argument("--tolerance-ms", type=float, default=0.2)
    p.add_argument("--json", default=None, help="also write the figures here")
    a = p.parse_args()

    B = "locust" if a.compare == "locust" else "runner2"  # noqa: N806  (the path held against the runner)
    if a.nice:
        os.nice(a.nice)
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) > 1 else (None, None)
    load_before = os.getloadavg()
    rounds, rows, ok = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            args = ("--tokens", a.tokens, "--interval-ms", str(a.interval_ms), "--ttft-ms", str(a.ttft_ms),
                    "--mode", mode)
            with schedserver(*args, cpu=server_cpu) as url:
                truth(url)
                per_path: dict[str, list[dict]] = {"runner": [], B: []}
                for rnd in range(a.rounds):
                    order = ("runner", B) if rnd % 2 == 0 else (B, "runner")
                    for path in order:
                        folder = Path(tmp) / f"{mode}-{rnd}-{path}"
                        folder.mkdir()
                        if path in ("runner", "runner2"):
                            stage = run_runner(url, a, folder / "runner", client_cpu)
                        else:
                            stage = run_locust(url, a, folder, client_cpu)
                        row = figures(mode, path, rnd, stage, true_summary(truth(url), stage))
                        per_path[path].append(row)
                        rounds.append(row)
                        print(f"  {mode:9} round {rnd + 1} {path:6}: ITL p50 err {row['itl_p50_err']:+.3f} "
                              f"p99 err {row['itl_p99_err']:+.3f} ms", file=sys.stderr, flush=True)
                med = {path: median_row(mode, path, rs) for path, rs in per_path.items()}
                for q in ("p50", "p99"):
                    d = abs(med[B][f"itl_{q}_err"] - med["runner"][f"itl_{q}_err"])
                    med[B][f"itl_{q}_err_vs_runner"] = round(d, 4)
                    med[B][f"itl_{q}_diff_interval"] = diff_interval(
                        [r[f"itl_{q}_err"] for r in per_path[B]], [r[f"itl_{q}_err"] for r in per_path["runner"]])
                    for path in ("runner", B):
                        errs = [r[f"itl_{q}_err"] for r in per_path[path]]
                        med[path][f"itl_{q}_err_range"] = (min(errs), max(errs))
                    ok = ok and d <= a.tolerance_ms
                rows += [med["runner"], med[B]]
    load_after = os.getloadavg()

    head = (f"{'mode':9} {'path':6} {'C':>4} {'reqs':>5} {'tok/s':>8}  {'ITL p50':>8} {'err':>7}  {'ITL p99':>8} "
            f"{'err':>7}  {'TTFT p50 err':>12} {'TTFT p99 err':>12}  {'lag p99':>7}  bound")
    print(f"ITL error (client − server send log), {a.concurrency} streams, interval {a.interval_ms:g} ms, "
          f"tokens/chunk {a.tokens}, output {a.max_tokens} tokens, window {a.duration:g} s, median of "
          f"{a.rounds} rounds; milliseconds. Load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print(head)
    print("-" * len(head))
    for row in rows:
        print(f"{row['mode']:9} {row['path']:6} {row['concurrency']:>4} {row['requests']:>5} {row['tok_s']:>8.1f}  "
              f"{row['itl_p50']:>8.3f} {row['itl_p50_err']:>+7.3f}  {row['itl_p99']:>8.3f} {row['itl_p99_err']:>+7.3f}  "
              f"{row['ttft_p50_err']:>+12.3f} {row['ttft_p99_err']:>+12.3f}  {row['loop_lag_p99_ms'] or 0:>7.3f}  "
              f"{row['client_bound']}")
    for row in rows:
        if row["path"] == B:
            print(f"{row['mode']}: |{B} ITL error − runner ITL error| = p50 {row['itl_p50_err_vs_runner']:.3f} ms, "
                  f"p99 {row['itl_p99_err_vs_runner']:.3f} ms (tolerance {a.tolerance_ms} ms); 90% bootstrap "
                  f"interval of {B} − runner over rounds: p50 {row['itl_p50_diff_interval']}, "
                  f"p99 {row['itl_p99_diff_interval']}")
    for row in rows:
        print(f"  {row['mode']:9} {row['path']:6} single-round ITL error range: p50 {row['itl_p50_err_range']}, "
              f"p99 {row['itl_p99_err_range']}")
    print("PASS" if ok else "FAIL")
    print("per round:", file=sys.stderr)
    for r in rounds:
        print(f"  {r['mode']:9} {r['round'] + 1} {r['path']:6} ITL p50 err {r['itl_p50_err']:+.3f}  "
              f"p99 err {r['itl_p99_err']:+.3f}  lag p99 {r['loop_lag_p99_ms'] or 0:.3f}  cpu {r['cpu_pct'] or 0:.0f}%",
              file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps({"medians": rows, "rounds": rounds, "args": vars(a),
                                            "load_before": load_before, "load_after": load_after}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
