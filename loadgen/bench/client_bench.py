"""How exact the client stays as the chunk rate grows (``loadgen bench client``).

The known-schedule server runs on one core, the client (the real stage runner,
the same code as ``loadgen run``) on the other. Each point is a stage at
``streams`` concurrent streams sending a chunk every ``interval_ms``; the
client's reported percentiles are compared with the same percentiles computed
from the server's own send log over the same window (TTFT from the client's write
of the request, as the client defines it). Error = client − truth.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import aiohttp
import orjson

from loadgen.bench.procs import pinned, schedserver
from loadgen.bench.sendlog import summarize, truth_record
from loadgen.request import GenRequest
from loadgen.client.loops import new_event_loop
from loadgen.run.processes import run_stage_processes
from loadgen.run.spec import RunOptions, StageSpec
from loadgen.client.target import Target


def _fetch_truth(url: str) -> dict | list:
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "?clear=1") as r:
                return orjson.loads(await r.read())

    loop = new_event_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


_COMPARED = ("ttft", "itl", "chunk_gap")


class _SendTimes(dict):
    """request id → the client's send time: the true TTFT runs from the client's write of the request
    (the server reads it later by however long the client took to get the bytes out)."""

    def __call__(self, rec) -> None:
        self[rec.server_id or rec.rid] = rec.t0_ns


def _errors(res, truth_records: list) -> dict:
    truth = summarize(truth_records, _COMPARED, res.window_start_ns, res.window_end_ns)
    d = res.to_dict()
    point = {"client_bound": d["client"]["client_bound"], "cpu_pct": d["client"]["cpu_pct"],
             "lag_p99_ms": d["client"]["loop_lag_ms"].get("p99")}
    for name in _COMPARED:
        for p in ("p50", "p99"):
            c, t = d[name].get(p), truth[name].get(p)
            point[f"{name}_{p}_truth"] = t
            point[f"{name}_{p}_err"] = None if c is None or t is None else round(c - t, 3)
    return point


def _watch(url: str, scrape_s: float | None):
    """The stage's /metrics watcher, as ``loadgen run`` holds it (None: no scraping, the bench's default)."""
    from loadgen.serverview.watch import ServerWatch

    return None if scrape_s is None else ServerWatch(url, scrape_s)


def run_point(streams: int, interval_ms: float, tokens: str = "1", mode: str = "lockstep",
              duration_s: float = 5.0, processes: int = 1, max_tokens: int = 200, ttft_ms: float = 50.0,
              warmup_s: float = 3.0, ramp_s: float = 0.0, scrape_s: float | None = None) -> dict:
    source = RequestCycle([GenRequest(workload="bench", prompt="x", max_tokens=max_tokens)])
    sent = _SendTimes()
    with schedserver("--mode", mode, "--interval-ms", str(interval_ms), "--tokens", tokens,
                     "--ttft-ms", str(ttft_ms), cpu=0) as url:
        with pinned(1):
            spec = StageSpec(streams, duration_s=duration_s, warmup_s=warmup_s, ramp_s=ramp_s)
            res = run_stage_processes(Target("bench", url, "sglang"), spec, source, RunOptions(),
                                      processes=processes, on_record=sent if processes == 1 else None,
                                      window_probe=_watch(url, scrape_s))
        log = _fetch_truth(url + "/truth")
    recs = [truth_record(rid, sent.get(rid, v["received_ns"]), v["sends"]) for rid, v in log.items()]
    point = {"streams": streams, "interval_ms": interval_ms, "mode": mode, "processes": processes,
             "chunks_per_s": round(streams * 1000 / interval_ms),
             "scrapes": None if res.server is None else (res.server.get("samples") or {}).get("taken", 0) + 2}
    point.update(_errors(res, recs))
    return point


# Prompts of each kind the simulator's acceptance model tells apart (copy, code, chat, free text).
SIM_PROMPTS = (
    "Copy this sentence exactly: the quick brown fox jumps over the lazy dog near the river bank.",
    "Write a short poem about autumn leaves falling in a quiet park at dusk.",
    "def add(a, b):\n    return a + b\n# Rewrite this function with type hints and a docstring.",
    "What is a good way to learn to cook simple meals at home?",
)


def sim_point(concurrency: int, duration_s: float = 30.0, warmup_s: float = 5.0, max_tokens: int = 100,
              scrape_s: float | None = None) -> dict:
    """The stage runner against the speculative simulator's own event log (the issue's accuracy target).

    pcie-8gpu-eagle3 in spec mode at real speed, multi-token chunks of 1-4
    tokens; every user's requests cycle through prompts of each kind. Truth:
    the simulator's write time of each event carrying tokens, from the
    client's write of the request.
    """
    from loadgen.sim.process import SimProcess

    sent = _SendTimes()
    reqs = [GenRequest(workload="bench", prompt=p, max_tokens=max_tokens, ignore_eos=True) for p in SIM_PROMPTS]
    # Room for every stream in the running batch: the target is the client's error, not queueing.
    with SimProcess(profile="pcie-8gpu-eagle3", mode="spec", seed=7, cpu=0,
                    extra_args=("--max-running-requests", str(max(64, concurrency)))) as sim:
        with pinned(1):
            spec = StageSpec(concurrency, duration_s=duration_s, warmup_s=warmup_s, ramp_s=min(2.0, warmup_s / 2))
            res = run_stage_processes(Target("sim", sim.url, "sglang"), spec, RequestCycle(reqs), RunOptions(),
                                      processes=1, on_record=sent, window_probe=_watch(sim.url, scrape_s))
        log = _fetch_truth(sim.url + "/loadgen/truth")
    recs = [truth_record(t["rid"], sent[t["rid"]], [(ts, n) for ts, n in t["events"] if n > 0])
            for t in log if t["rid"] in sent]
    point = {"concurrency": concurrency, "requests": res.total.completed,
             "chunks": res.total.hists["chunk_gap"].count,
             "scrapes": None if res.server is None else (res.server.get("samples") or {}).get("taken", 0) + 2}
    point.update(_errors(res, recs))
    return point


class RequestCycle:
    """Picklable seed → the given requests over and over (one sequence shared by a stage's users)."""

    def __init__(self, reqs: list[GenRequest]) -> None:
        self.reqs = reqs

    def __call__(self, seed: int):
        return itertools.cycle(self.reqs)


def memory_growth(tokens_target: int = 10_000_000, streams: int = 100) -> dict:
    """RSS growth over a long stage, after a short one at the same concurrency.

    Records are folded into histograms as their requests finish, so memory
    should not grow with run length. The short stage first brings pools,
    buffers and histograms to their working size: what grows after that is
    what a long run costs.
    """

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    req = GenRequest(workload="bench", prompt="x", max_tokens=2000)
    target_args = ("--mode", "staggered", "--interval-ms", "2", "--tokens", "5", "--ttft-ms", "5")
    with schedserver(*target_args, cpu=0) as url, pinned(1):
        t = Target("mem", url, "sglang")
        warm = run_stage_processes(t, StageSpec(streams, duration_s=15, warmup_s=0), RequestCycle([req]),
                                   RunOptions(), processes=1)
        rate = warm.total.window_tokens / 15
        del warm
        before = rss_mb()
        t0 = time.perf_counter()
        res = run_stage_processes(t, StageSpec(streams, duration_s=tokens_target / max(rate, 1), warmup_s=0),
                                  RequestCycle([req]), RunOptions(), processes=1)
        after = rss_mb()
    tokens = res.total.window_tokens
    return {"tokens": tokens, "seconds": round(time.perf_counter() - t0, 1), "rss_before_mb": round(before, 1),
            "rss_after_mb": round(after, 1), "growth_mb": round(after - before, 1),
            "growth_mb_per_million_tokens": round((after - before) / max(tokens, 1) * 1e6, 3)}


AB_FIGURES = ("ttft_p50_err", "ttft_p99_err", "itl_p50_err", "itl_p99_err", "chunk_gap_p50_err", "chunk_gap_p99_err",
              "lag_p99_ms")


def scrape_ab(point, scrape_s: float, **kw) -> list[dict]:
    """One point three times: without scraping (A), again without (A': the noise floor), with /metrics
    read every ``scrape_s`` (B). Per figure: |A' - A| (noise) and |B - A| (what scraping moved)."""
    a, a2, b = point(**kw), point(**kw), point(scrape_s=scrape_s, **kw)
    rows = []
    for f in AB_FIGURES:
        va, va2, vb = a.get(f), a2.get(f), b.get(f)
        if None in (va, va2, vb):
            continue
        # the band the two runs without scraping span, widened by the stamps' 0.05 ms resolution
        lo, hi = min(va, va2) - 0.05, max(va, va2) + 0.05
        side = "above" if vb > hi else "below" if vb < lo else "in band"
        rows.append({**{k: v for k, v in kw.items() if k in ("streams", "concurrency", "mode")}, "figure": f,
                     "A": va, "A2": va2, "B": vb, "noise": round(abs(va2 - va), 3),
                     "moved": round(vb - (va + va2) / 2, 3), "scrapes": b.get("scrapes"), "B_vs_A": side,
                     "within": side == "in band"})
    return rows


def _fmt(points: list[dict]) -> str:
    cols = ["mode", "streams", "chunks_per_s", "processes", "ttft_p50_err", "ttft_p99_err", "itl_p50_err",
            "itl_p99_err", "chunk_gap_p99_err", "lag_p99_ms", "cpu_pct", "client_bound"]
    return _table(points, cols)


def _table(points: list[dict], cols: list[str]) -> str:
    rows = [cols] + [[str(p.get(c)) for c in cols] for p in points]
    w = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    return "\n".join("  ".join(v.rjust(wi) for v, wi in zip(r, w)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="loadgen bench client", description=__doc__)
    ap.add_argument("--streams", default="50,100,150,200,250", help="stream counts to sweep ('' for none)")
    ap.add_argument("--interval-ms", type=float, default=10.0, help="chunk interval per stream (10 = 100 chunks/s)")
    ap.add_argument("--modes", default="lockstep,staggered")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--processes", default="1", help="comma-separated process counts to try")
    ap.add_argument("--sim", default="", metavar="C,C",
                    help="also measure against the speculative simulator at these concurrencies (e.g. 1,50)")
    ap.add_argument("--memory", type=int, default=0, metavar="TOKENS",
                    help="also measure memory growth over a stage of this many tokens (e.g. 10000000)")
    ap.add_argument("--json", default=None, help="write the points to this file too")
    ap.add_argument("--scrape-ab", type=float, default=None, metavar="S",
                    help="instead: each point without /metrics scraping twice (the A/A noise floor) and with it "
                         "every S seconds, and what scraping moved")
    a = ap.parse_args(argv)
    if a.scrape_ab is not None:
        return _main_ab(a)
    if len(os.sched_getaffinity(0)) < 2:
        print("note: fewer than 2 cores: server and client share one; errors include the server's own lag")
    if a.sim:
        print("stage runner vs the speculative simulator's event log (errors in ms; target |p50|, |p99| <= 0.5):")
        rows = [sim_point(int(c), duration_s=max(a.duration, 30.0)) for c in a.sim.split(",")]
        cols = ["concurrency", "requests", "chunks", "ttft_p50_err", "ttft_p99_err", "itl_p50_err", "itl_p99_err",
                "chunk_gap_p50_err", "chunk_gap_p99_err", "lag_p99_ms", "client_bound"]
        print(_table(rows, cols))
    points = []
    for mode in a.modes.split(","):
        for procs in (int(x) for x in a.processes.split(",")):
            for streams in (int(x) for x in a.streams.split(",") if x):
                p = run_point(streams, a.interval_ms, mode=mode, duration_s=a.duration, processes=procs)
                points.append(p)
                print(_fmt([p]).splitlines()[-1] if len(points) > 1 else _fmt([p]), flush=True)
    for mode in a.modes.split(","):
        ladder = sorted((p for p in points if p["mode"] == mode and p["processes"] == 1), key=lambda p: p["chunks_per_s"])
        bad = [p for p in ladder if p["itl_p99_err"] is None or abs(p["itl_p99_err"]) > 1.0]
        good = [p["chunks_per_s"] for p in ladder if not bad or p["chunks_per_s"] < bad[0]["chunks_per_s"]]
        if ladder:
            print(f"{mode}: |ITL p99 error| <= 1 ms up to {max(good) if good else 'no'} chunks/s on one client core"
                  + (f"; first above 1 ms at {bad[0]['chunks_per_s']} chunks/s" if bad else
                     " (the highest rate tried)"))
    if a.memory:
        print("memory:", orjson.dumps(memory_growth(a.memory)).decode())
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(points, option=orjson.OPT_INDENT_2))
    return 0


def _main_ab(a) -> int:
    rows: list[dict] = []
    cols = ["figure", "A", "A2", "B", "noise", "moved", "scrapes", "B_vs_A"]
    print(f"/metrics read every {a.scrape_ab:g} s (B) against none (A, A'); errors vs truth in ms; moved = B - "
          "mean(A, A'); in band: B within [min(A, A'), max(A, A')] ± 0.05 ms (the stamps' resolution)")
    for c in (int(x) for x in a.sim.split(",") if x):
        got = scrape_ab(sim_point, a.scrape_ab, concurrency=c, duration_s=max(a.duration, 30.0))
        print(f"simulator C={c}:\n" + _table(got, cols), flush=True)
        rows += got
    for mode in a.modes.split(","):
        for streams in (int(x) for x in a.streams.split(",") if x):
            got = scrape_ab(run_point, a.scrape_ab, streams=streams, interval_ms=a.interval_ms, mode=mode,
                            duration_s=a.duration)
            print(f"{mode} {streams} streams:\n" + _table(got, cols), flush=True)
            rows += got
    moved = [r for r in rows if not r["within"]]
    print(f"{len(rows) - len(moved)} of {len(rows)} figures in the band of the two runs without scraping"
          + ("" if not moved else "; outside it: " + ", ".join(
              f"{r.get('mode', 'sim')} {r.get('streams', r.get('concurrency'))} {r['figure']} {r['B_vs_A']} "
              f"({r['B']:g} against {r['A']:g}, {r['A2']:g})" for r in moved)))
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
