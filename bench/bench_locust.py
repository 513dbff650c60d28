"""The Locust path's timing error against the scripted runner's, both against a server's own send log.

    python bench/bench_locust.py                      # 250 streams, lockstep and staggered
    python bench/bench_locust.py --concurrency 50 --modes lockstep --duration 5

For each schedule, the known-schedule server (loadgen.bench.schedserver, pinned
to CPU 0) is measured twice, each client pinned to CPU 1:

  runner  ``loadgen run --url ...``           (the scripted asyncio stage runner)
  locust  ``locust -f scenarios/ramp.py --headless --config ...``  (the Locust user via the bridge)

Each writes its usual results file (one stage). The server's log of every
chunk it sent is then folded with the *same* metric code over the *same*
steady window, and "error" = client figure − true figure. The Locust path
passes when its ITL p50/p99 errors are within ``--tolerance-ms`` (0.2) of the
runner's. Exit status 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.bench.procs import schedserver  # noqa: E402
from loadgen.bench.truth import truth_record  # noqa: E402
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


def pinned_env_cmd(cmd: list[str], cpu: int | None) -> list[str]:
    return (["taskset", "-c", str(cpu)] + cmd) if cpu is not None else cmd


def run_runner(url: str, a, out: Path, cpu) -> dict:
    cmd = [sys.executable, "-m", "loadgen", "run", "--url", url, "--concurrency", str(a.concurrency),
           "--duration", f"{a.duration}s", "--warmup", f"{a.warmup}s", "--max-tokens", str(a.max_tokens),
           "--label", "runner", "--out", str(out)]
    subprocess.run(pinned_env_cmd(cmd, cpu), check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["stages"][0]


def run_locust(url: str, a, folder: Path, cpu) -> dict:
    cfg = folder / "bench.toml"
    cfg.write_text(
        f'[run]\nladder = [{a.concurrency}]\nwarmup = {a.warmup}\nduration = {a.duration}\n'
        f'max_tokens = {a.max_tokens}\nout = "{folder / "locust"}"\n\n'
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
    p.add_argument("--interval-ms", type=float, default=40.0, help="server step / per-stream chunk interval")
    p.add_argument("--ttft-ms", type=float, default=30.0)
    p.add_argument("--tokens", default="1,3,2", help="tokens per chunk pattern")
    p.add_argument("--max-tokens", type=int, default=120)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--tolerance-ms", type=float, default=0.2)
    p.add_argument("--json", default=None, help="also write the figures here")
    a = p.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) > 1 else (None, None)
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            args = ("--tokens", a.tokens, "--interval-ms", str(a.interval_ms), "--ttft-ms", str(a.ttft_ms),
                    "--mode", mode)
            with schedserver(*args, cpu=server_cpu) as url:
                truth(url)
                res = {}
                for path in ("runner", "locust"):
                    folder = Path(tmp) / f"{mode}-{path}"
                    folder.mkdir()
                    if path == "runner":
                        stage = run_runner(url, a, folder / "runner.json", client_cpu)
                    else:
                        stage = run_locust(url, a, folder, client_cpu)
                    t = true_summary(truth(url), stage)
                    res[path] = {"stage": stage, "truth": t}
                for path in ("runner", "locust"):
                    st, t = res[path]["stage"], res[path]["truth"]
                    row = {"mode": mode, "path": path, "concurrency": a.concurrency,
                           "requests": st["requests"]["completed"], "tok_s": st["output_tokens_per_s"],
                           "client_bound": st["client"]["client_bound"],
                           "loop_lag_p99_ms": st["client"]["loop_lag_ms"].get("p99")}
                    for m in METRICS:
                        for q in ("p50", "p99"):
                            c, tr = st[m].get(q), t[m].get(q)
                            row[f"{m}_{q}"] = c
                            row[f"{m}_{q}_true"] = tr
                            row[f"{m}_{q}_err"] = round(c - tr, 4) if c is not None and tr is not None else None
                    rows.append(row)
                r, l_ = rows[-2], rows[-1]
                for q in ("p50", "p99"):
                    d = abs(l_[f"itl_{q}_err"] - r[f"itl_{q}_err"])
                    l_[f"itl_{q}_err_vs_runner"] = round(d, 4)
                    ok = ok and d <= a.tolerance_ms

    head = (f"{'mode':9} {'path':6} {'C':>4} {'reqs':>5} {'tok/s':>8}  {'ITL p50':>8} {'err':>7}  {'ITL p99':>8} "
            f"{'err':>7}  {'TTFT p50 err':>12} {'TTFT p99 err':>12}  {'lag p99':>7}  bound")
    print(f"ITL error (client − server send log), {a.concurrency} streams, interval {a.interval_ms:g} ms, "
          f"tokens/chunk {a.tokens}, window {a.duration:g} s; milliseconds")
    print(head)
    print("-" * len(head))
    for row in rows:
        print(f"{row['mode']:9} {row['path']:6} {row['concurrency']:>4} {row['requests']:>5} {row['tok_s']:>8.1f}  "
              f"{row['itl_p50']:>8.3f} {row['itl_p50_err']:>+7.3f}  {row['itl_p99']:>8.3f} {row['itl_p99_err']:>+7.3f}  "
              f"{row['ttft_p50_err']:>+12.3f} {row['ttft_p99_err']:>+12.3f}  {row['loop_lag_p99_ms'] or 0:>7.3f}  "
              f"{row['client_bound']}")
    for row in rows:
        if row["path"] == "locust":
            print(f"{row['mode']}: |locust ITL error − runner ITL error| = p50 {row['itl_p50_err_vs_runner']:.3f} ms, "
                  f"p99 {row['itl_p99_err_vs_runner']:.3f} ms (tolerance {a.tolerance_ms} ms)")
    print("PASS" if ok else "FAIL")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
