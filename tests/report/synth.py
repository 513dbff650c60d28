"""Synthetic two-target runs for report tests, built with the real StageAccumulator.

Each user slot streams requests back to back through a short steady window;
per-user decode speed falls with concurrency, faster for the speculative
target at low C (it sends ~``accept`` tokens per chunk) and slower at high C,
so output throughput crosses near ``CROSS_C``. Per-request speed noise gives
the time bins the spread the bootstrap needs. Optional flags: a client-bound
stage, failed requests, approximate token counts, an incomplete stage.
"""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import orjson

from loadgen.record import RequestRecord
from loadgen.stage.result import ClientHealth, StageAccumulator

WINDOW_NS = 2_000_000_000
BIN_NS = 100_000_000
T0 = 10_000_000_000
CROSS_C = 22.5  # where 100/(1+C/40) = 160/(1+C/15)


def user_rate(target: str, c: int, speedup: float = 1.0) -> float:
    """Per-user decode rate (tokens/s) of a target at concurrency c."""
    if target == "baseline":
        return 100.0 / (1.0 + c / 40.0)
    return speedup * 160.0 / (1.0 + c / 15.0)


def _records(target: str, workload: str, c: int, rng: random.Random, *, speedup: float, fail_every: int,
             exact: bool):
    rate = user_rate(target, c, speedup)
    accept = 2.6 if target == "spec" else 1.0
    lo, hi = T0, T0 + WINDOW_NS
    n = 0
    for u in range(c):
        t = lo - int(rng.uniform(0.0, 0.6) * 1e9)
        while t < hi:
            n += 1
            rid = f"{target}-{c}-{u}-{n}"
            rec = RequestRecord(target=target, workload=workload, rid=rid, start_ns=t, sent_ns=t + 100_000)
            ttft = int((0.02 + 0.0008 * c) * rng.lognormvariate(0.0, 0.2) * 1e9)
            now = rec.sent_ns + ttft
            speed = rate * rng.lognormvariate(0.0, 0.15)
            tokens = rng.randint(24, 80)
            sent = 0
            ts, ks = array("q"), array("l")
            first = True
            while sent < tokens:
                k = 1 if first or target == "baseline" else min(tokens - sent, rng.choice((1, 2, 3, 3, 4)))
                if not first:
                    now += int(k / speed * rng.lognormvariate(0.0, 0.1) * 1e9)
                ts.append(now)
                ks.append(k)
                sent += k
                first = False
            rec.chunk_ns, rec.chunk_tokens = ts, ks
            rec.end_ns = now + 200_000
            rec.output_tokens = sent
            rec.finish_reason = "length"
            rec.token_counts_exact = exact
            if target == "spec":
                steps = len(ks)
                rec.verify_ct = steps
                rec.accept_length = sent / steps
                rec.accepted_drafts = sent - steps
                rec.proposed_drafts = 2 * steps
            if fail_every and n % fail_every == 0:
                rec.fail("http_503", "Service Unavailable: queue full")
                rec.chunk_ns, rec.chunk_tokens = array("q"), array("l")
                rec.end_ns = rec.sent_ns + 5_000_000
                now = rec.end_ns
            yield rec
            t = now + 300_000


def stage(target: str, workload: str, c: int, index: int, seed: int = 0, *, speedup: float = 1.0,
          fail_every: int = 0, exact: bool = True, client_bound: bool = False, incomplete: bool = False) -> dict:
    rng = random.Random(f"{seed}:{target}:{workload}:{c}")
    acc = StageAccumulator(T0, T0 + WINDOW_NS, BIN_NS)
    for rec in _records(target, workload, c, rng, speedup=speedup, fail_every=fail_every, exact=exact):
        acc.add(rec)
    health = ClientHealth(cpu_pct=[96.0 if client_bound else 35.0])
    url = "http://127.0.0.1:30000" if target == "baseline" else "http://127.0.0.1:30001"
    res = acc.result(target=target, url=url, protocol="sglang", concurrency=c, client=health,
                     stage_index=index, incomplete=incomplete)
    return res.to_dict()


def server(spec: bool, max_running: int = 48) -> dict:
    info = {"max_running_requests": max_running, "speculative_algorithm": "EAGLE3" if spec else None,
            "speculative_num_steps": 2 if spec else None, "speculative_adaptive": False,
            "model_path": "example/Model-8B", "version": "0.5.0"}
    return {"url": "", "reachable": True, "error": "", "engine": "sglang", "speculative": spec,
            "models": ["example/Model-8B"], "server_info": info}


def run_doc(ladder=(1, 5, 30, 100), workloads=("chat", "code"), *, seed: int = 0, flags: bool = True,
            max_running: int = 48) -> dict:
    """A whole crossover-style run: every (workload, C) for both targets, alternating."""
    stages = []
    for wl in workloads:
        speedup = 1.0 if wl == "chat" else 1.6  # "code": speculation wins everywhere measured
        for c in ladder:
            for target in ("baseline", "spec"):
                kw = {}
                if flags and wl == workloads[0]:
                    if target == "spec" and c == ladder[-1]:
                        kw["fail_every"] = 7
                    if target == "baseline" and c == ladder[0]:
                        kw["client_bound"] = True
                    if target == "baseline" and c == ladder[1]:
                        kw["exact"] = False
                stages.append(stage(target, wl, c, len(stages), seed, speedup=speedup, **kw))
    run = {"loadgen_version": "0.1.0", "started_unix": 1_700_000_000.0, "finished_unix": 1_700_000_100.0,
           "command": "crossover", "argv": ["crossover", "--synthetic"], "seed": seed,
           "roles": {"baseline": "baseline", "spec": "spec"}, "ladder": list(ladder), "workloads": list(workloads),
           "targets": [{"label": "baseline", "url": "http://127.0.0.1:30000", "protocol": "sglang"},
                       {"label": "spec", "url": "http://127.0.0.1:30001", "protocol": "sglang"}],
           "servers": {"baseline": server(False, 512), "spec": server(True, max_running)},
           "interrupted": False}
    return {"schema": "loadgen.run/1", "run": run, "stages": stages}


def write_run(out: Path, doc: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return out


def _noisy(d: dict, cv: float, seed: str) -> dict:
    """Multiply each time bin's tokens by 1 + cv·N(0, 1): a stage whose throughput swings from bin to bin."""
    r = random.Random(seed)
    for tl in [d["timeline"]] + [m["timeline"] for m in d["workloads"].values()]:
        tl["tokens"] = [int(max(0, t * (1 + cv * r.gauss(0.0, 1.0)))) for t in tl["tokens"]]
    return d


CLIENT_REASON = "event-loop lag p99 0.10 ms > 10% of median chunk gap 0.00 ms"
CLIENT_ADVICE = "the server sends drafts as bursts; measure on a quieter machine (synthetic advice)"


def cut_run_doc() -> dict:
    """Shaped like the issue's GPU run: ladder 1,4,16,64,256 planned for predictable and freetext, cut by an
    interrupt after C=64. predictable: speculation better at C=1, the same speed above but with bins swinging
    ±120 % (ties far too wide to call), every spec stage client-bound; freetext: baseline stages only, its first
    spec stage cut in the warm-up (the spec server came last, one GPU)."""
    stages = []
    for c in (1, 4, 16, 64):
        for target in ("baseline", "spec"):
            # speedup makes the spec's per-user rate equal the baseline's above C=1
            speedup = 1.0 if c == 1 else user_rate("baseline", c) / user_rate("spec", c)
            d = stage(target, "predictable", c, len(stages), speedup=speedup)
            if c > 1:
                _noisy(d, 1.2, f"{target}:{c}")
            if target == "spec":
                d["client"].update(client_bound=True, reasons=[CLIENT_REASON], advice=CLIENT_ADVICE)
            stages.append(d)
    for c in (1, 4, 16, 64):
        stages.append(stage("baseline", "freetext", c, len(stages)))
    cut = stage("spec", "freetext", 1, len(stages), incomplete=True)
    cut["cut"] = {"phase": "warm-up", "at_s": 41.2, "by": "interrupt"}
    stages.append(cut)
    doc = run_doc(ladder=(1,), workloads=("predictable",), flags=False)
    run = doc["run"]
    run.update(ladder=[1, 4, 16, 64, 256], workloads=["predictable", "freetext"], interrupted=True,
               cut={"by": "interrupt", "stages_not_run": 9})
    run["planned_stages"] = [{"workload": w, "concurrency": c, "target": t} for w in run["workloads"]
                             for c in run["ladder"] for t in ("baseline", "spec")]
    doc["stages"] = stages
    return doc
