"""The embedded simulators' own answers beside an open-loop run's: its rate crossovers, capacities and
saturation rates in virtual time (loadgen.sim.knownrate), added to rates.json and the terminal.

In: rates.json as a dict, the run's ``simulator`` block and its run.json. Out: the same dict with
``simulator_truth`` on each reported TPOT crossover, ``truth`` on each capacity (✓ when within
±15 % of loadgen's estimate, as the issue holds it) and on each saturation. Only what the run
asked about is computed: each costs seconds of the simulator's scheduler in virtual time
(a crossover ~10 s on two cores, a capacity ~8 s), so a run is checked on the per-user decode rate, E2E from plan (mean and p50) and TPOT p50.
"""

from __future__ import annotations

from loadgen.errors import LoadgenError
from loadgen.sim.knownrate import known_capacity, known_rate_crossovers, known_saturation

CHECKED = {"decode_rate": "decode_rate_mean", "e2e_planned_mean": "e2e_mean", "tpot_p50": "tpot_p50",
           "e2e_planned_p50": "e2e_p50"}
"""rates.json metric → the simulator's name for it (sim.openloop.METRICS), checked by default."""
REQUESTS = 2000
"""Window requests per virtual-time rate: TPOT p50 to about 1 % (sim/openloop.py, LONG_RUN_REQUESTS 4000
for the benchmark)."""
CLOSE = 0.15


def add_truth(d: dict, sim: dict, doc: dict, *, requests: int = REQUESTS, metrics: dict = CHECKED) -> None:
    ol = doc.get("run", {}).get("open_loop") or {}
    if ol.get("axis") != "rate":
        return  # a trace's replay has no arrival process to draw again
    arrival = ol.get("arrival") or "poisson"
    seed = doc.get("run", {}).get("seed", sim.get("seed", 0))
    modes = sim.get("modes") or {"baseline": "baseline", "spec": "spec"}
    ref = d["reference"]
    memos: dict[str, dict] = {}  # per workload: its metrics and capacities search the same rates
    try:
        for wl, per_cand in d["metrics"].items():
            for cand, per in per_cand.items():
                for name, sim_name in metrics.items():
                    m = per.get(name)
                    if m is None or not m["analysis"]["crossovers"] or cand not in modes or ref not in modes:
                        continue
                    found = known_rate_crossovers(sim, wl, sim_name, m["analysis"]["crossovers"],
                                                  modes=(modes[ref], modes[cand]), arrival=arrival, seed=seed,
                                                  points=7, requests=requests, memo=memos.setdefault(wl, {}))
                    m["simulator_truth"] = [_crossing_words(k) for k in found]
        rates = [p["rate"] for ps in d["points"].values() for p in ps]
        for wl, per in d.get("capacity", {}).items():
            slos = [(f"{s['key']}_p{s['percentile']:g}", s["limit_ms"]) for s in d["slos"]]
            for label, c in per.items():
                if label not in modes:
                    continue
                true = known_capacity(sim, wl, modes[label], slos, lo=min(rates) / 4, hi=max(rates) * 2,
                                      arrival=arrival, seed=seed, requests=requests, memo=memos.setdefault(wl, {}))
                c["truth"] = true
                c["truth_mark"], c["truth_words"] = _capacity_words(c, true)
        for wl, per in d.get("saturation", {}).items():
            for label, s in per.items():
                if label in modes and s.get("at") is not None:
                    lo = s.get("kept") or s["at"] / 4
                    s["truth"] = known_saturation(sim, wl, modes[label], lo * 0.8, s["at"] * 1.25, arrival=arrival,
                                                  seed=seed, requests=requests)
    except LoadgenError as exc:  # a workload the simulator cannot recompute (a file): say so, keep the run
        d["simulator_truth_error"] = str(exc)


def _crossing_words(k) -> dict:
    if k.true is None:
        return {"true": None, "covered": False, "mark": "✗",
                "words": f"the simulator itself has no crossover between {k.searched[0]:.3g} and {k.searched[1]:.3g} "
                         f"req/s: {k.reported:.3g} is a false alarm"}
    where = "inside" if k.covered else "outside"
    return {"true": k.true, "covered": k.covered, "mark": "✓" if k.covered else "✗",
            "words": f"the simulator's own crossover for this traffic: {k.true:.3g} req/s ({where} the reported "
                     "interval)"}


def _capacity_words(c: dict, true: float | None) -> tuple[str, str]:
    if true is None:
        return "?", "the simulator itself fails the SLOs at every rate searched"
    if c.get("estimate") is None:
        return "·", f"the simulator's own capacity: {true:.3g} req/s"
    err = c["estimate"] / true - 1
    inside = c["ci_low"] <= true <= c["ci_high"]
    ok = abs(err) <= CLOSE
    return ("✓" if ok else "✗"), (f"the simulator's own capacity: {true:.3g} req/s (loadgen's estimate "
                                  f"{err * 100:+.0f} %, {'inside' if inside else 'outside'} its interval)")
