"""The worked example of docs/real-servers.md: baseline vs n-gram speculation per workload and concurrency.

    python -m tests.e2e.figures [--duration 10s] [--max-tokens 96] [--ladder 1,2,4] [--out DIR]
    python -m tests.e2e.figures --from DIR          # print the table again from a finished run

Starts the baseline and the speculative llama-server (tests/e2e/llama.py, both pinned to the
last core), pins itself and loadgen to the other cores, and runs the user's path:

    loadgen crossover --baseline-url B --spec-url S --protocol chat \\
        --ladder 1,2,4 --workload predictable,code,freetext --max-tokens 96 ...

while scraping both servers' /metrics. It prints, per workload and concurrency, what loadgen
reported — per-user decode rate (1 / TPOT p50), output throughput, the speculative server's
accept rate (drafts accepted / proposed, from llama.cpp's ``timings``) and the share of its
output that came from accepted drafts — and the servers' own decode rate over the same
window from /metrics, as a check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from .llama import LlamaServer, ensure_llama_server, ensure_model
from .runs import LOADGEN, MetricsPoller, run_cli

WORKLOADS = ["predictable", "code", "freetext"]


def _server_rate(poller: MetricsPoller | None, stage: dict) -> float | None:
    if poller is None:
        return None
    w = stage["window"]
    d = poller.between(w["start_ns"], w["end_ns"])
    return 1000 / d.ms_per_token if d.ms_per_token else None


def table(doc: dict, pollers: dict[str, MetricsPoller] | None = None) -> str:
    rows: dict[tuple[str, int], dict[str, dict]] = {}
    for s in doc["stages"]:
        (wl,) = s["workloads"]
        rows.setdefault((wl, s["concurrency"]), {})[s["target"]] = s
    head = ("| workload | C | decode tok/s per user: baseline | spec | spec/base | output tok/s: baseline | spec "
            "| accept rate | output from drafts | server decode tok/s: baseline | spec | requests (b/s) |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    order = {w: i for i, w in enumerate(WORKLOADS)}
    for (wl, c), by in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        b, s = by.get("baseline"), by.get("spec")
        if not (b and s):
            continue
        db = (b.get("decode_rate") or {}).get("p50")
        ds = (s.get("decode_rate") or {}).get("p50")
        ratio = f"{ds / db:.2f}x" if db and ds else "-"
        acc = s.get("accept_rate")
        share = s["drafts"]["accepted"] / s["server_output_tokens"] if s["server_output_tokens"] else None
        sb = _server_rate((pollers or {}).get("baseline"), b)
        ss = _server_rate((pollers or {}).get("spec"), s)
        f = lambda v, d=1: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
        lines.append(
            f"| {wl} | {c} | {f(db)} | {f(ds)} | {ratio} | {f(b['output_tokens_per_s'])} | "
            f"{f(s['output_tokens_per_s'])} | {f(acc, 2)} | {'-' if share is None else f'{share:.0%}'} | "
            f"{f(sb)} | {f(ss)} | {b['requests']['completed']}/{s['requests']['completed']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="from_", help="print the table from this crossover output folder")
    ap.add_argument("--out", default=None, help="output folder (default: a new one under $TMPDIR)")
    ap.add_argument("--ladder", default="1,2,4")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--protocol", default="chat", choices=("chat", "completions"))
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--warmup", default="4s")
    ap.add_argument("--max-tokens", default="96")
    ap.add_argument("--seed", default="1")
    args = ap.parse_args()
    if args.from_:
        print(table(json.loads((Path(args.from_) / "run.json").read_text())))
        return
    out = Path(args.out or f"{os.environ.get('TMPDIR', '/tmp')}/loadgen-figures-{time.strftime('%Y%m%d-%H%M%S')}")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1] if len(cpus) > 1 else None
    client = set(cpus[:-1]) if len(cpus) > 1 else set(cpus)
    os.sched_setaffinity(0, client)
    binary, model = ensure_llama_server(), ensure_model()
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(LlamaServer(model=model, binary=binary, spec=False, cpu=server_cpu))
        spec = stack.enter_context(LlamaServer(model=model, binary=binary, spec=True, cpu=server_cpu))
        pollers = {"baseline": stack.enter_context(MetricsPoller(base.url)),
                   "spec": stack.enter_context(MetricsPoller(spec.url))}
        cmd = LOADGEN + ["crossover", "--baseline-url", base.url, "--spec-url", spec.url, "--protocol", args.protocol,
                         "--model", "gemma", "--ladder", args.ladder, "--workload", args.workloads,
                         "--max-tokens", args.max_tokens, "--duration", args.duration, "--warmup", args.warmup,
                         "--seed", args.seed, "--out", str(out)]
        print(" ".join(cmd[2:]), file=sys.stderr, flush=True)
        proc = run_cli(cmd, cpus=client, timeout=7200)
        if proc.returncode != 0:
            sys.exit(f"loadgen crossover failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    doc = json.loads((out / "run.json").read_text())
    print(proc.stdout)
    print(f"\nservers pinned to core {server_cpu}, client on {sorted(client)}; {time.monotonic() - t0:.0f} s; "
          f"results in {out}\n")
    print(table(doc, pollers))


if __name__ == "__main__":
    main()
