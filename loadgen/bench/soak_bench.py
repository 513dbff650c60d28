"""A long closed-loop run at one concurrency: does anything leak or drift? (``loadgen bench soak``)

The same concurrency (``--concurrency``, default 250) run as a sequence of equal stages against the
embedded simulator (``--time-scale`` 5), through loadgen's own ramp (loadgen/run/ramp.py: one target,
a ladder of the same C repeated, each stage with its steady warm-up, its window and its cool-down;
``--max-run-time`` is the ramp's budget, as in ``loadgen run``). ``--duration`` is the measured time:
``--duration / --stage`` stages of a ``--stage`` window each; every stage adds its warm-up and
cool-down around its window. As each stage ends it is written (run.json, .csv, .hlog: the run's
results writer, so a killed soak keeps its stages) and one row is printed: stage index, elapsed,
the client's RSS (MiB: the main process and every process under it but the simulator, the
``--processes`` children included, peak of a sample every second over the stage), the simulator's
RSS, output tok/s, TTFT p50/p99, ITL p50, requests completed/failed, client_bound.

At the end, the verdict, each line against its bound:

- RSS slope per hour (client and simulator): least squares over the stages after the first two
  (the first ones warm caches and pools), as % of their mean per hour; bound ``--rss-bound`` (5 %/h);
- drift of output tok/s and TTFT p50 between the first and the last third of the stages, relative to
  the first third; bound: twice the standard error of that difference from the stage-to-stage noise
  (σ from successive differences, sqrt(mean((x[i+1] - x[i])²) / 2), which a slow drift barely
  inflates), so a drift inside it is what the noise alone would give;
- ``--max-run-time`` kept: the ramp's wall time ≤ the budget + the longest cool-down of a stage.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from loadgen.client.stream import Timeouts
from loadgen.client.target import Target
from loadgen.errors import LoadgenError
from loadgen.run.ramp import RampPlan, run_ramp
from loadgen.run.results import ResultsWriter
from loadgen.run.spec import RunOptions
from loadgen.settings.parse import duration as parse_duration

PROFILE = "pcie-8gpu-eagle3"
RSS_BOUND_PCT_PER_H = 5.0


# --- resident memory, from /proc ------------------------------------------------------------------------

def rss_kib(pid: int) -> int | None:
    """VmRSS of one process (KiB), None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return 0  # a zombie: no VmRSS line


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root: int, skip: set[int] = frozenset()) -> list[int]:
    """``root`` and every process under it, but those in ``skip`` and theirs."""
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in skip:
            continue
        out.append(pid)
        todo += kids.get(pid, [])
    return out


class RssSampler:
    """Every ``every_s``: the client's RSS (this process and the processes under it, the simulator's tree
    left out) and the simulator's; :meth:`take` returns the peaks since the last take, and the process count."""

    def __init__(self, sim_pid: int, every_s: float = 1.0) -> None:
        self.sim_pid = sim_pid
        self.every_s = every_s
        self._lock = threading.Lock()
        self._reset()
        self._done = threading.Event()
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-rss")
        self._thread.start()

    def _reset(self) -> None:
        self.client_kib = 0
        self.sim_kib = 0
        self.procs = 0

    def sample(self) -> None:
        pids = tree(os.getpid(), {self.sim_pid})
        client = sum(r for r in map(rss_kib, pids) if r)
        sim = sum(r for r in map(rss_kib, tree(self.sim_pid)) if r)
        with self._lock:
            self.client_kib = max(self.client_kib, client)
            self.sim_kib = max(self.sim_kib, sim)
            self.procs = max(self.procs, len(pids))

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            self.sample()

    def take(self) -> tuple[float, float, int]:
        """(client MiB, simulator MiB, client processes): the peaks since the last take."""
        self.sample()
        with self._lock:
            out = (self.client_kib / 1024, self.sim_kib / 1024, self.procs)
            self._reset()
        return out

    def close(self) -> None:
        self._done.set()


# --- rows and verdict --------------------------------------------------------------------------------------

HEADER = (f"{'stage':>5} {'elapsed':>8} {'client MiB':>10} {'procs':>5} {'sim MiB':>8} {'tok/s':>8} "
          f"{'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ok':>6} {'failed':>6}  client_bound")


def _f(v, nd: int = 1, w: int = 8) -> str:
    return f"{v:>{w}.{nd}f}" if isinstance(v, (int, float)) and v == v else f"{'-':>{w}}"


def row_of(d: dict, elapsed_s: float, client_mib: float, sim_mib: float, procs: int) -> dict:
    return {"stage": d["stage_index"], "elapsed_s": round(elapsed_s, 1), "client_rss_mib": round(client_mib, 1),
            "client_processes": procs, "sim_rss_mib": round(sim_mib, 1),
            "tok_s": d["output_tokens_per_s"], "ttft_p50_ms": d["ttft"].get("p50"), "ttft_p99_ms": d["ttft"].get("p99"),
            "itl_p50_ms": d["itl"].get("p50"), "completed": d["requests"]["completed"],
            "failed": d["requests"]["failed"], "client_bound": bool(d["client"]["client_bound"]),
            "incomplete": bool(d.get("incomplete")),
            "cooldown_s": max(0.0, (time.perf_counter_ns() - d["window"]["end_ns"]) / 1e9)}


def row_text(r: dict) -> str:
    m, s = divmod(int(r["elapsed_s"]), 60)
    return (f"{r['stage']:>5} {f'{m}:{s:02d}':>8} {_f(r['client_rss_mib'], 1, 10)} {r['client_processes']:>5} "
            f"{_f(r['sim_rss_mib'])} {_f(r['tok_s'])} {_f(r['ttft_p50_ms'], 1, 9)} {_f(r['ttft_p99_ms'], 1, 9)} "
            f"{_f(r['itl_p50_ms'], 2)} {r['completed']:>6} {r['failed']:>6}  "
            + ("yes" if r["client_bound"] else "no") + (" (incomplete)" if r["incomplete"] else ""))


def slope_per_h(xs_s: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys against xs (seconds), per hour; None under two points or no spread in xs."""
    n = len(xs_s)
    if n < 2:
        return None
    mx, my = sum(xs_s) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs_s)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs_s, ys)) / sxx * 3600


def rss_line(name: str, rows: list[dict], key: str, bound: float) -> tuple[str, bool | None]:
    fit = [r for r in rows[2:] if r[key] > 0]
    slope = slope_per_h([r["elapsed_s"] for r in fit], [r[key] for r in fit])
    if slope is None:
        return f"  {name} RSS slope: not judged (needs 2+ stages after the first two, {len(fit)} here)", None
    mean = sum(r[key] for r in fit) / len(fit)
    pct = 100 * slope / mean
    ok = pct < bound
    return (f"  {'✓' if ok else '✗'} {name} RSS slope {slope:+.1f} MiB/h = {pct:+.2f} %/h of its mean {mean:.1f} MiB "
            f"(least squares over stages {fit[0]['stage']}-{fit[-1]['stage']}, after the first two); "
            f"bound: < {bound:g} %/h"), ok


def noise_sigma(xs: list[float]) -> float:
    """The stage-to-stage noise: σ from successive differences (a slow trend barely moves it)."""
    d = [b - a for a, b in zip(xs, xs[1:])]
    return math.sqrt(sum(x * x for x in d) / (2 * len(d))) if d else float("nan")


def drift_line(name: str, rows: list[dict], key: str, unit: str) -> tuple[str, bool | None]:
    vals = [r[key] for r in rows if isinstance(r[key], (int, float)) and not r["incomplete"]]
    k = len(vals) // 3
    if k < 1 or len(vals) < 3:
        return f"  {name} drift: not judged (needs 3+ complete stages, {len(vals)} here)", None
    first, last = vals[:k], vals[-k:]
    a, b = sum(first) / k, sum(last) / k
    sigma = noise_sigma(vals)
    drift = 100 * (b - a) / a if a else float("nan")
    bound = 100 * 2 * sigma * math.sqrt(2 / k) / a if a else float("nan")
    ok = abs(drift) <= bound
    return (f"  {'✓' if ok else '✗'} {name} drift {drift:+.2f} % (first third {a:.1f} {unit}, last third {b:.1f} "
            f"{unit}, {k} stage(s) each); bound: ±{bound:.2f} % = 2 × the standard error of that difference from "
            f"the stage-to-stage noise (σ {sigma:.1f} {unit} = {100 * sigma / a:.2f} % per stage)"), ok


def verdict(rows: list[dict], *, wall_s: float, max_run_s: float | None, rss_bound: float) -> tuple[list[str], bool]:
    lines, oks = [f"verdict over {len(rows)} stage(s), {wall_s:.0f} s of ramp:"], []
    for text, ok in (rss_line("client", rows, "client_rss_mib", rss_bound),
                     rss_line("simulator", rows, "sim_rss_mib", rss_bound),
                     drift_line("output tok/s", rows, "tok_s", "tok/s"),
                     drift_line("TTFT p50", rows, "ttft_p50_ms", "ms")):
        lines.append(text)
        oks.append(ok)
    cool = max((r["cooldown_s"] for r in rows), default=0.0)
    if max_run_s:
        ok = wall_s <= max_run_s + cool
        lines.append(f"  {'✓' if ok else '✗'} --max-run-time {max_run_s:g} s: the ramp took {wall_s:.1f} s; bound: ≤ "
                     f"the budget + the longest cool-down of a stage ({cool:.1f} s) = {max_run_s + cool:.1f} s")
        oks.append(ok)
    else:
        lines.append("  --max-run-time: none given (no budget to keep)")
    failed = sum(r["failed"] for r in rows)
    bound_n = sum(r["client_bound"] for r in rows)
    lines.append(f"  requests failed: {failed}; client-bound stages: {bound_n} of {len(rows)}")
    judged = [o for o in oks if o is not None]
    return lines, all(judged)


# --- the run -----------------------------------------------------------------------------------------------

class SoakWriter(ResultsWriter):
    """The run's results writer; as each stage is written, its RSS figures join its dict and its row is printed."""

    def __init__(self, path, meta, sampler: RssSampler, t0: float) -> None:
        super().__init__(path, meta)
        self.sampler = sampler
        self.t0 = t0
        self.rows: list[dict] = []

    def add_stage(self, res, **extra) -> dict:
        client, sim, procs = self.sampler.take()
        elapsed = time.monotonic() - self.t0
        extra["soak"] = {"client_rss_mib": round(client, 1), "sim_rss_mib": round(sim, 1),
                         "client_processes": procs, "elapsed_s": round(elapsed, 1)}
        d = super().add_stage(res, **extra)
        r = row_of(d, elapsed, client, sim, procs)
        self.rows.append(r)
        print(row_text(r), flush=True)
        return d


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="loadgen bench soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=250, help="the one concurrency of every stage (default 250)")
    p.add_argument("--duration", default="1h", help="measured time: --duration / --stage stages (default 1h)")
    p.add_argument("--stage", default="2m", help="each stage's window (default 2m)")
    p.add_argument("--warmup", default="5s", help="each stage's least warm-up (it runs on until steady)")
    p.add_argument("--max-run-time", default=None, help="the ramp's budget, as loadgen run's --max-run-time")
    p.add_argument("--time-scale", type=float, default=5.0, help="the simulator's --time-scale (default 5)")
    p.add_argument("--profile", default=PROFILE)
    p.add_argument("--mode", default="baseline")
    p.add_argument("--workload", default="chat")
    p.add_argument("--processes", type=int, default=1, help="client processes per stage (loadgen run --processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rss-bound", type=float, default=RSS_BOUND_PCT_PER_H, help="RSS growth bound, %% per hour")
    p.add_argument("--out", default="results/soak", help="results folder: run.json, run.csv, run.hlog")
    a = p.parse_args(argv)
    a.duration_s = parse_duration(a.duration, "--duration")
    a.stage_s = parse_duration(a.stage, "--stage")
    a.warmup_s = parse_duration(a.warmup, "--warmup")
    a.max_run_s = parse_duration(a.max_run_time, "--max-run-time") if a.max_run_time else None
    if a.stage_s <= 0 or a.duration_s < a.stage_s:
        raise LoadgenError("--stage must be > 0 and no longer than --duration")
    if a.concurrency < 1 or a.processes < 1:
        raise LoadgenError("--concurrency and --processes must be >= 1")
    a.stages = max(1, round(a.duration_s / a.stage_s))
    return a


def main(argv: list[str]) -> int:
    from loadgen.sim.process import SimProcess
    from loadgen.workloads import Lengths, resolve

    a = parse(argv)
    lengths = Lengths.parse(None, None, None, False)
    resolve(a.workload, lengths)  # a bad name fails before the simulator starts

    def make_source(spec: str):
        return resolve(spec, lengths).requests

    cpus = sorted(os.sched_getaffinity(0))
    sim_cpu = cpus[0] if len(cpus) > 1 else None
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a killed soak ends as Ctrl-C: its stages kept
    meta = {"command": "bench soak", "argv": sys.argv[1:], "workload": a.workload, "seed": a.seed,
            "soak": {"concurrency": a.concurrency, "stages": a.stages, "stage_s": a.stage_s,
                     "duration_s": a.duration_s, "max_run_s": a.max_run_s, "processes": a.processes},
            "simulator": {"profile": a.profile, "mode": a.mode, "time_scale": a.time_scale}}
    print(f"soak: C={a.concurrency}, {a.stages} stage(s) of a {a.stage_s:g} s window (each with its warm-up and "
          f"cool-down), simulator {a.profile}/{a.mode} at time-scale {a.time_scale:g}, {a.processes} client "
          f"process(es)" + (f", --max-run-time {a.max_run_s:g} s" if a.max_run_s else ""), flush=True)
    interrupted = False
    with SimProcess(profile=a.profile, mode=a.mode, time_scale=a.time_scale, seed=a.seed, cpu=sim_cpu) as sim:
        if sim_cpu is not None:
            os.sched_setaffinity(0, set(cpus[1:]))
        try:
            target = Target(a.mode, sim.url, "sglang")
            meta["targets"] = [{"label": target.label, "url": target.url, "protocol": target.protocol}]
            sampler = RssSampler(sim.pid)
            t0 = time.monotonic()
            writer = SoakWriter(Path(a.out) / "run.json", meta, sampler, t0)
            plan = RampPlan(targets=[target], ladder=[a.concurrency] * a.stages, workloads=[a.workload],
                            make_source=make_source, opts=RunOptions(seed=a.seed, timeouts=Timeouts()),
                            duration_s=a.stage_s, warmup_s=a.warmup_s, processes=a.processes,
                            max_run_s=a.max_run_s)
            print(HEADER, flush=True)
            try:
                run_ramp(plan, writer)
            except KeyboardInterrupt:
                interrupted = True
            wall = time.monotonic() - t0
            sampler.close()
            writer.finish(interrupted=interrupted)
        finally:
            if sim_cpu is not None:
                os.sched_setaffinity(0, set(cpus))
    lines, ok = verdict(writer.rows, wall_s=wall, max_run_s=a.max_run_s, rss_bound=a.rss_bound)
    cut = writer.run.get("cut")
    if cut:
        lines.append(f"  cut by {cut['by']}: {cut['stages_not_run']} planned stage(s) not run; the "
                     f"{len(writer.rows)} run are kept")
    print("\n".join(lines), flush=True)
    print(f"results in {Path(a.out) / 'run.json'} (+ .csv, .hlog)" + ("; interrupted, the stages so far kept" if interrupted else ""),
          flush=True)
    return 130 if interrupted else (0 if ok else 1)
