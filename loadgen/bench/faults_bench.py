"""Is every fault a server can throw counted, under its own class, and none lost? (``loadgen bench faults``)

One full closed-loop stage per fault class (loadgen's own stage runner, ``run_stage_sync``), each against a
fresh embedded simulator that injects it (``loadgen sim --faults``, docs/simulator.md "Faults"), one with
every class mixed, one whose server exits mid-stage (``die_after``) and one whose server stops answering
(``hang_after``); two fault-free stages first, whose difference is the A/A noise. Requests go to SGLang's
native ``/generate`` with loadgen's request ids, so the simulator's truth (its --truth-file) and the
client's records join request by request. Per stage and fault it prints: faults injected (the truth),
how many loadgen counted under the fault's class (``EXPECTED``) and what the others became, requests
lost (a request the simulator received before the window closed with no outcome at the client, or a
faulted one the client counted as a success: must be 0), whether the stage was kept (written to a
run.json and read back, failures and all), and whether the healthy requests' TTFT p50 and ITL p50
moved beyond the A/A noise. ``--locust`` also runs the mixed faults through ``locust -f
scenarios/ramp.py --headless`` and compares Locust's failure counts with the truth.

stall and slow_headers last longer than the client's read timeout here (``--stall`` > ``--read-timeout``),
so each is a ``timeout``; a shorter stall is no failure, only a long ITL gap in a completed request.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from loadgen.bench.procs import pinned
from loadgen.client.stream import Timeouts
from loadgen.client.target import Target
from loadgen.run.results import ResultsWriter, load
from loadgen.run.spec import RunOptions, StageSpec
from loadgen.run.stage import run_stage_sync
from loadgen.sim.faults import DIE, HANG, KINDS, TIMED
from loadgen.sim.process import SimProcess

EXPECTED: dict[str, tuple[str, ...]] = {
    "reset": ("disconnected",),
    "http503": ("http_503",),
    "http500": ("http_500",),
    "http429": ("http_429",),
    "error_event": ("server_error",),
    "malformed": ("bad_event",),
    "stall": ("timeout",),
    "slow_headers": ("timeout",),
    "truncate": ("truncated",),
    DIE: ("disconnected",),
    HANG: ("timeout",),
}
"""The RequestRecord.error_class each injected fault must become."""
PROFILE = "pcie-8gpu-eagle3"


def _kind_spec(kind: str, p: float, stall_s: float) -> str:
    return f"{kind}={p:g}" + (f":{stall_s:g}s" if kind in TIMED else "")


def _seconds(text: str) -> float:
    return float(text[:-1]) if text.endswith("s") else float(text)


def stages(a) -> list[tuple[str, str]]:
    """(stage name, --faults spec) in the order they run; die_after/hang_after are filled in from the A/A."""
    out = [("none (A)", ""), ("none (A')", "")]
    out += [(k, _kind_spec(k, a.p, a.stall)) for k in KINDS]
    out.append(("mixed", ",".join(_kind_spec(k, a.mixed_p, a.stall) for k in KINDS)))
    out += [("die_after", "die_after"), ("hang_after", "hang_after")]
    out.append(("none (A'')", ""))  # last: the noise then spans the whole matrix's drift too
    return out


def source(max_tokens: str):
    from loadgen.workloads import Lengths, resolve

    return resolve("chat", Lengths.parse(None, max_tokens, None, True)).requests


def run_one(name: str, spec: str, a, src) -> dict:
    """One stage against a simulator injecting ``spec``; its records joined with the simulator's truth."""
    two = len(os.sched_getaffinity(0)) > 1
    with tempfile.TemporaryDirectory() as tmp:
        truth_path = Path(tmp) / "truth.jsonl"
        recs: dict[str, tuple[str | None, str, int]] = {}

        def on_record(rec) -> None:
            recs[rec.rid] = (rec.error_class, rec.error_message or "", rec.retries)

        extra = ["--truth-file", str(truth_path)]
        t0 = time.monotonic()
        with SimProcess(profile=PROFILE, mode="baseline", time_scale=a.time_scale, seed=a.seed, cpu=0 if two else None,
                        faults=spec or None, extra_args=extra) as sim:
            st = StageSpec(a.concurrency, duration_s=a.duration, warmup_s=a.warmup)
            opts = RunOptions(seed=a.seed, timeouts=Timeouts(read_s=a.read_timeout))
            with pinned(1):
                res = run_stage_sync(Target(name.split()[0], sim.url, "sglang"), st, src, opts, on_record=on_record)
            # requests the stage cancelled at its end are aborted by the simulator after its abort delay
            time.sleep(2.0 / a.time_scale + 0.3)
            exit_code = sim.proc.poll()
        truth = [json.loads(line) for line in truth_path.read_text().splitlines() if line.strip()]
        writer = ResultsWriter(Path(tmp) / "run.json", {"bench": "faults", "stage": name})
        writer.add_stage(res)
        writer.finish()
        doc = load(Path(tmp) / "run.json")
    d = res.to_dict()
    kept_stage = next((s for s in doc.get("stages", []) if s.get("stage_index") == d.get("stage_index")), None)
    kept = kept_stage is not None and kept_stage["requests"] == d["requests"]
    return {"stage": name, "spec": spec, "seconds": round(time.monotonic() - t0, 1), "sim_exit": exit_code,
            **join(truth, recs, res.window_end_ns), "window": d["requests"], "kept": kept,
            "incomplete": d.get("incomplete", False), "ttft_p50": d["ttft"].get("p50"), "itl_p50": d["itl"].get("p50")}


def join(truth: list[dict], recs: dict[str, tuple[str | None, str, int]], window_end_ns: int) -> dict:
    """Per injected fault: how many the client counted under its class, and as what the others; lost requests."""
    faults: dict[str, dict] = {}
    lost, cut, healthy_failed, seen = 0, 0, Counter(), set()
    for t in truth:
        rid, kind = t["rid"], t.get("fault", "")
        seen.add(rid)
        got = recs.get(rid)
        if kind:
            f = faults.setdefault(kind, {"injected": 0, "counted": 0, "as": Counter(), "after_window": 0})
            f["injected"] += 1
        if got is None:
            # no outcome at the client: a request the stage cancelled at its end (received after the window, not
            # one of the stage's), or lost
            if t["received_ns"] >= window_end_ns:
                cut += 1
                if kind:
                    f["after_window"] += 1
            else:
                lost += 1
                if kind:
                    f["as"]["(no record)"] += 1
            continue
        cls = got[0]
        if kind:
            if cls in EXPECTED.get(kind, ()):
                f["counted"] += 1
            else:
                f["as"][cls or "ok"] += 1
                lost += cls is None  # a fault counted as a success is a failure lost
        elif cls is not None:
            healthy_failed[cls] += 1
    # e.g. connect after the simulator exited; "sent again": first written on a pooled connection the server had
    # closed, taken for a stale keep-alive connection and sent again (StreamClient._send)
    unseen = Counter((cls or "ok") + (" (sent again)" if retries else "")
                     for rid, (cls, _, retries) in recs.items() if rid not in seen)
    first = {}
    for cls, msg, _ in recs.values():
        if cls is not None and cls not in first:
            first[cls] = msg
    return {"sent": len(recs), "truth": len(truth), "faults": faults, "lost": lost, "cut_at_end": cut,
            "healthy_failed": dict(healthy_failed), "unseen_by_sim": dict(unseen), "first_messages": first}


def _delta(x, ref) -> float | None:
    return None if x is None or not ref else (x - ref) / ref * 100


def print_table(rows: list[dict]) -> None:
    ref = rows[0]
    twins = [r for r in rows[1:] if not r["spec"]]
    noise_ttft = max((abs(_delta(r["ttft_p50"], ref["ttft_p50"]) or 0.0) for r in twins), default=0.0)
    noise_itl = max((abs(_delta(r["itl_p50"], ref["itl_p50"]) or 0.0) for r in twins), default=0.0)
    bound_ttft, bound_itl = max(2 * noise_ttft, 2.0), max(2 * noise_itl, 2.0)
    head = (f"{'stage':<12} {'fault':<12} {'injected':>8} {'counted as':<13} {'counted':>7} {'after window':>12} "
            f"{'other':<10} {'lost':>4} {'window failed/started':>21} {'kept':<4} {'TTFT p50 ms':>15} "
            f"{'ITL p50 ms':>15}  moved")
    print(head)
    print("-" * len(head))
    for r in rows:
        w = r["window"]
        dt, di = _delta(r["ttft_p50"], ref["ttft_p50"]), _delta(r["itl_p50"], ref["itl_p50"])
        if r is ref:
            moved = "(reference)"
        elif r in twins:
            moved = "(A/A)"
        elif dt is None or di is None:
            moved = "no healthy requests"
        else:
            over = [m for m, d, b in (("TTFT", dt, bound_ttft), ("ITL", di, bound_itl)) if abs(d) > b]
            moved = ("yes: " + ", ".join(over)) if over else "no"
        ttft = "-" if r["ttft_p50"] is None else f"{r['ttft_p50']:.2f}" + ("" if r is ref else f" ({dt:+.1f}%)")
        itl = "-" if r["itl_p50"] is None else f"{r['itl_p50']:.3f}" + ("" if r is ref else f" ({di:+.1f}%)")
        stage_cols = (f"{r['lost']:>4} {w['failed']:>10}/{w['started']:<10} {'yes' if r['kept'] else 'NO':<4} "
                      f"{ttft:>15} {itl:>15}  {moved}")
        lines = sorted(r["faults"].items(), key=lambda kv: (list(EXPECTED).index(kv[0]) if kv[0] in EXPECTED else 99))
        if not lines:
            lines = [("-", {"injected": 0, "counted": 0, "as": {}, "after_window": 0})]
        for i, (kind, f) in enumerate(lines):
            other = ", ".join(f"{k}:{v}" for k, v in f["as"].items()) or "-"
            expected = "/".join(EXPECTED.get(kind, ("?",))) if kind != "-" else "-"
            left = (f"{r['stage'] if i == 0 else '':<12} {kind:<12} {f['injected']:>8} {expected:<13} {f['counted']:>7} "
                    f"{f['after_window']:>12} {other:<10}")
            print((left + " " + stage_cols) if i == 0 else left)
        matched = r["sent"] - sum(r["unseen_by_sim"].values())
        extra = [f"the simulator received {r['truth']} = {matched} ended at the client + {r['cut_at_end']} cancelled "
                 f"by the stage's end (started after its window) + {r['lost']} lost"]
        if r["unseen_by_sim"]:
            extra.append("never reached the simulator: " + ", ".join(f"{k}:{v}" for k, v in r["unseen_by_sim"].items()))
        if r["healthy_failed"]:
            extra.append("unfaulted requests failed: " + ", ".join(f"{k}:{v}" for k, v in r["healthy_failed"].items()))
        if r["sim_exit"] is not None:
            extra.append(f"simulator exited with status {r['sim_exit']}")
        for e in extra:
            print(f"{'':<12} {'':<12} ({e})")
    print(f"\nmoved: |Δ| against the first fault-free stage beyond 2 × the largest A/A difference (TTFT "
          f"±{noise_ttft:.1f} %, ITL ±{noise_itl:.1f} %; at least 2 %). after window: requests the stage cancelled at "
          f"its end (started after the window, not the stage's). lost: received by the simulator before the window "
          f"closed with no outcome at the client, or faulted and counted as a success.")
    classes = {}
    for r in rows:
        for cls, msg in r["first_messages"].items():
            classes.setdefault(cls, msg)
    if classes:
        print("first message per class:")
        for cls, msg in sorted(classes.items()):
            print(f"  {cls:<13} {msg[:110]}")


def locust_pass(a, spec: str) -> dict:
    """The mixed faults through ``locust -f scenarios/ramp.py --headless``: Locust's failures vs the truth."""
    root = Path(__file__).resolve().parents[2]
    ramp = root / "scenarios" / "ramp.py"
    if not ramp.exists():
        return {"error": f"{ramp} not found"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        truth_path = tmp / "truth.jsonl"
        with SimProcess(profile=PROFILE, mode="baseline", time_scale=a.time_scale, seed=a.seed,
                        faults=spec, extra_args=["--truth-file", str(truth_path)]) as sim:
            (tmp / "faulty.toml").write_text(f'[run]\nread_timeout = "{a.read_timeout:g}s"\nworkload = "chat"\n'
                                             f'max_tokens = "{a.max_tokens}"\nignore_eos = true\nseed = {a.seed}\n\n'
                                             f'[targets.faulty]\nurl = "{sim.url}"\nprotocol = "sglang"\n')
            cmd = [sys.executable, "-m", "locust", "-f", str(ramp), "--headless", "--config", str(tmp / "faulty.toml"),
                   "--ladder", str(a.concurrency), "--warmup", f"{a.warmup:g}s", "--duration", f"{a.duration:g}s",
                   "--csv", str(tmp / "locust")]
            p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=600)
            time.sleep(2.0 / a.time_scale + 0.3)
        if p.returncode not in (0, 1):
            return {"error": f"locust exited {p.returncode}: {p.stderr.strip().splitlines()[-1:] or '?'}"}
        truth = [json.loads(line) for line in truth_path.read_text().splitlines() if line.strip()]
        failures = Counter()
        fpath = tmp / "locust_failures.csv"
        if fpath.exists():
            import csv

            for row in csv.DictReader(fpath.open()):
                m = re.search(r"(\w+): ", row.get("Error", ""))
                failures[m.group(1) if m else row.get("Error", "?")] += int(row.get("Occurrences", 0))
        ramp_doc = json.loads((tmp / "results" / "ramp" / "ramp.json").read_text())
        stage = ramp_doc["stages"][0] if ramp_doc.get("stages") else {}
        window = stage.get("requests", {})
        end_ns = stage.get("window", {}).get("end_ns", 0)
        injected = Counter(t.get("fault") for t in truth if t.get("fault"))
        # received before the window closed: the stage waits for these, so each must be one of Locust's failures
        # (a later one may have been cancelled by the stage's end, which Locust does not count)
        before_end = Counter(t.get("fault") for t in truth if t.get("fault") and t["received_ns"] < end_ns)
        locust_total = 0
        stats = tmp / "locust_stats.csv"
        if stats.exists():
            import csv

            for row in csv.DictReader(stats.open()):
                if row.get("Name") == "Aggregated":
                    locust_total = int(row.get("Request Count", 0))
    return {"injected": dict(injected), "before_end": dict(before_end), "locust_failures": dict(failures), "truth": len(truth),
            "locust_requests": locust_total, "window": window, "returncode": p.returncode}


def print_locust(res: dict) -> None:
    if "error" in res:
        print(f"locust: {res['error']}")
        return
    print(f"\nLocust (locust -f scenarios/ramp.py --headless, the mixed faults): {res['locust_requests']} requests in "
          f"Locust's statistics, {res['truth']} received by the simulator")
    print(f"{'class':<13} {'faults injected':<34} {'before the window closed':>24} {'Locust failures':>15}  counted")
    by_class: dict[str, list[str]] = {}
    for kind in EXPECTED:
        if kind in res["injected"]:
            by_class.setdefault(EXPECTED[kind][0], []).append(kind)
    for cls, kinds in by_class.items():
        total = sum(res["injected"][k] for k in kinds)
        low = sum(res["before_end"].get(k, 0) for k in kinds)
        got = res["locust_failures"].get(cls, 0)
        ok = "yes" if low <= got <= total else "NO"
        names = " + ".join(f"{k} {res['injected'][k]}" for k in kinds)
        print(f"{cls:<13} {names:<34} {low:>24} {got:>15}  {ok}")
    others = {k: v for k, v in res["locust_failures"].items() if k not in by_class}
    if others:
        print("other Locust failures: " + ", ".join(f"{k}:{v}" for k, v in others.items()))
    w = res["window"]
    if w:
        print(f"its ramp.json window: {w.get('started')} started, {w.get('completed')} completed, {w.get('failed')} "
              f"failed (" + ", ".join(f"{k}:{v['count']}" for k, v in w.get("failures", {}).items()) + ")")
    print("counted: Locust's failures of the class lie between the faults received before the window closed (the "
          "stage waits for those) and all injected (a later one may be cancelled by the stage's end, not counted).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="loadgen bench faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=_seconds, default=4.0, help="window seconds (default 4)")
    p.add_argument("--warmup", type=_seconds, default=1.0)
    p.add_argument("--time-scale", type=float, default=2.0)
    p.add_argument("--max-tokens", default="uniform:16,32")
    p.add_argument("--p", type=float, default=0.05, help="per-request probability of a one-class stage's fault")
    p.add_argument("--mixed-p", type=float, default=0.015, help="each class's probability in the mixed stage")
    p.add_argument("--read-timeout", type=_seconds, default=1.0, help="the client's read timeout (s)")
    p.add_argument("--stall", type=_seconds, default=2.0, help="stall and slow_headers duration (s)")
    p.add_argument("--only", default=None, help="comma-separated stage names to run (after the A/A pair)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--locust", action="store_true", help="also run the mixed faults through Locust")
    p.add_argument("--json", default=None, help="write the rows here")
    a = p.parse_args(argv)
    src = source(a.max_tokens)
    rows: list[dict] = []
    only = set(a.only.split(",")) if a.only else None
    for name, spec in stages(a):
        if only is not None and not name.startswith("none") and name not in only:
            continue
        if spec in ("die_after", "hang_after"):
            # mid-window: about half way through the requests a fault-free stage sent
            n = max(4, int(rows[0]["sent"] * (a.warmup + a.duration / 2) / (a.warmup + a.duration)))
            spec = f"{spec}={n}"
        row = run_one(name, spec, a, src)
        rows.append(row)
        print(f"  {name}: {row['sent']} requests, {sum(f['injected'] for f in row['faults'].values())} faults, "
              f"{row['lost']} lost ({row['seconds']} s)", file=sys.stderr, flush=True)
    print_table(rows)
    out = {"rows": rows}
    if a.locust:
        mixed = next(spec for name, spec in stages(a) if name == "mixed")
        out["locust"] = locust_pass(a, mixed)
        print_locust(out["locust"])
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, default=dict))
    return 0 if all(r["lost"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
