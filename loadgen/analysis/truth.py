"""The embedded simulators' own answers beside a run's, computed from their cost model (loadgen.sim.known,
loadgen.sim.knownrate) and put into the typed analysis as :class:`loadgen.analysis.results.Checked`, so a
verdict on the simulator is checked against what is true.

In: a RunAnalysis or a RateAnalysis and the run's document (its ``simulator`` block: the embedded simulators'
profile, modes and seed). Out: the same analysis with the truth in it, and one line per part the simulator
cannot recompute (a dataset file not on this machine, traffic it does not plan).

* Concurrency (:func:`add_concurrency_truth`): ``simulator_truth`` beside each reported output-throughput
  crossover; with three or more configurations beside each switch of the policy, and ``gap_truth`` beside
  each adaptive configuration's gap to the envelope.
* Rate (:func:`add_rate_truth`): ``simulator_truth`` on each reported crossover of the checked metrics, on
  each capacity (✓ when within ±15 % of loadgen's estimate, as the issue holds it) and beside each adaptive
  configuration's gap to the envelope; ``truth`` on each saturation. Only what the run asked about is
  computed: each costs seconds of the simulator's scheduler in virtual time (a crossover ~10 s on two cores,
  a capacity ~8 s), so a run is checked on the per-user decode rate, E2E from plan (mean and p50) and TPOT p50.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from loadgen.analysis.compare import RunAnalysis
from loadgen.analysis.configs import ConfigsResult
from loadgen.analysis.rates import Capacity, RateAnalysis
from loadgen.analysis.results import DEFAULT_MARGIN, Checked
from loadgen.errors import LoadgenError
from loadgen.sim.known import KnownCrossover, KnownGap, KnownSwitch, known_crossovers, known_gaps, known_switches
from loadgen.sim.knownrate import known_capacity, known_rate_crossovers, known_rate_metric, known_saturation

CHECKED = {"decode_rate": "decode_rate_mean", "e2e_planned_mean": "e2e_mean", "tpot_p50": "tpot_p50",
           "e2e_planned_p50": "e2e_p50"}
"""rates.json metric → the simulator's name for it (sim.openloop.METRICS), checked by default."""
REQUESTS = 2000
"""Window requests per virtual-time rate: TPOT p50 to about 1 % (sim/openloop.py, LONG_RUN_REQUESTS 4000
for the benchmark)."""
CLOSE = 0.15
ENVELOPE_CHECKED = {"e2e_planned_mean": "e2e_mean", "tpot_p50": "tpot_p50"}
"""The envelope metrics (loadgen.analysis.rates.ENVELOPE_METRICS) whose adaptive gap is checked against the
simulator's own (TTFT p99 of a bursty schedule is too few requests' figure for a truth to land inside)."""


DECIDES = "output_tokens_per_s"
"""The concurrency axis's truth is the output-throughput crossover's (loadgen.sim.known)."""


def add_truth(result: RunAnalysis | RateAnalysis, doc: dict) -> list[str]:
    """The simulator's own answers into ``result`` when ``doc`` ran on the embedded simulators; the lines saying
    what it could not recompute."""
    sim = doc.get("run", {}).get("simulator")
    if not sim or "seed" not in sim:
        return []
    if isinstance(result, RateAnalysis):
        add_rate_truth(result, sim, doc)
        return [f"the simulator's own answers: not available ({result.simulator_truth_error})"] \
            if result.simulator_truth_error else []
    # the prompt seed is the run's (a Locust ramp's simulator block carries the simulator's own seed)
    return add_concurrency_truth(result, sim, doc["run"].get("seed", sim["seed"]))


def add_concurrency_truth(ra: RunAnalysis, sim: dict, seed: int) -> list[str]:
    """Beside each reported crossover of the embedded simulators, the one their cost model has."""
    if ra.configs:
        return _switch_truth(ra, sim, seed)
    said: list[str] = []
    for wl, per in ra.workloads.items():
        m = per.get(DECIDES)
        if wl == "all" or m is None or not m.analysis.crossovers:
            continue
        xs = [asdict(x) for x in m.analysis.crossovers]
        said += _known_into(m.simulator_truth, "crossover", wl,
                            lambda: map(crossover_checked, known_crossovers(sim, wl, xs, seed=seed)))
    return said


def _switch_truth(ra: RunAnalysis, sim: dict, seed: int) -> list[str]:
    """Beside each switch of the policy the embedded simulators' own, and beside each adaptive configuration's gap
    to the envelope the simulator's own steady-state gap, for three or more configurations."""
    modes = sim.get("modes") or {}
    said: list[str] = []
    for wl, per in ra.configs.items():
        r = per.get(DECIDES)
        if wl == "all" or r is None:
            continue
        sws = [{"from": w.from_label, "to": w.to_label, "estimate": w.estimate, "ci_low": w.ci_low,
                "ci_high": w.ci_high, "low_c": w.low_c, "high_c": w.high_c}
               for w in r.switches if w.confirmed and w.estimate is not None
               and w.from_label in modes and w.to_label in modes]
        gaps = [{"label": x, "concurrency": a.concurrency, "delta": g.delta, "ci_low": g.ci_low,
                 "ci_high": g.ci_high} for a in r.at for x in r.adaptive
                if (g := a.shortfall.get(x)) is not None and g.delta is not None and g.ci_low is not None]
        if sws:
            said += _known_into(r.simulator_truth, "switch points", wl,
                                lambda: map(switch_checked, known_switches(sim, wl, modes, sws, seed=seed)))
        if gaps and all(x in modes for x in r.labels):
            said += _known_into(r.gap_truth, "gaps of its adaptive modes", wl,
                                lambda: map(gap_checked, known_gaps(sim, wl, modes, r.adaptive, gaps, seed=seed)))
    return said


def _known_into(into: list[Checked], what: str, wl: str, find) -> list[str]:
    """``into`` filled with what ``find`` gives; or a line on why the simulator has no own answer (traffic it does
    not plan, a dataset file not on this machine)."""
    try:
        into[:] = list(find())
    except LoadgenError as e:
        return [f"workload {wl}: the simulator's own {what}: not available ({e})"]
    return []


def _checked(k, none: str, own: str) -> Checked:
    """✗ with ``none`` where the simulator has no such point in the searched range (the reported one is a false
    alarm), else ``own`` with where the simulator has it."""
    if k.true is None:
        return Checked("✗", none, None, False)
    where = "inside" if k.covered else "outside"
    return Checked("✓" if k.covered else "✗", f"{own}: C={k.true:.1f} ({where} the reported interval)", k.true,
                   k.covered)


def crossover_checked(k: KnownCrossover) -> Checked:
    return _checked(k, f"the simulator itself has no crossover between C={k.searched[0]} and {k.searched[1]}: "
                       f"C≈{k.reported:.1f} is a false alarm",
                    "the simulator's own crossover for this traffic")


def switch_checked(k: KnownSwitch) -> Checked:
    pair = f"{k.from_label} → {k.to_label}"
    return replace(_checked(k, f"the simulator itself does not switch {pair} between C={k.searched[0]} and "
                               f"{k.searched[1]}: the switch at C≈{k.reported:.1f} is a false alarm",
                            f"the simulator's own switch {pair} for this traffic"), label=k.from_label)


def gap_checked(k: KnownGap) -> Checked:
    where = "inside" if k.covered else "outside"
    return Checked("✓" if k.covered else "✗",
                   f"the simulator's own gap of {k.label} at C={k.concurrency}: {k.true * 100:+.1f} % against "
                   f"{k.envelope_label} ({where} the reported interval)", k.true, k.covered, label=k.label,
                   at=k.concurrency, envelope=k.envelope_label)


def add_rate_truth(d: RateAnalysis, sim: dict, doc: dict, *, requests: int = REQUESTS,
                   metrics: dict = CHECKED) -> None:
    ol = doc.get("run", {}).get("open_loop") or {}
    if ol.get("axis") != "rate":
        return  # a trace's replay has no arrival process to draw again
    arrival = ol.get("arrival") or "poisson"
    seed = doc.get("run", {}).get("seed", sim.get("seed", 0))
    modes = sim.get("modes") or {"baseline": "baseline", "spec": "spec"}
    ref = d.reference
    memos: dict[str, dict] = {}  # per workload: its metrics and capacities search the same rates
    try:
        for wl, per_cand in d.metrics.items():
            for cand, per in per_cand.items():
                for name, sim_name in metrics.items():
                    m = per.get(name)
                    if m is None or not m.analysis.crossovers or cand not in modes or ref not in modes:
                        continue
                    found = known_rate_crossovers(sim, wl, sim_name, [asdict(x) for x in m.analysis.crossovers],
                                                  modes=(modes[ref], modes[cand]), arrival=arrival, seed=seed,
                                                  points=7, requests=requests, memo=memos.setdefault(wl, {}))
                    m.simulator_truth = [_crossing_checked(k) for k in found]
        for wl, per_metric in d.configs.items():
            for name, res in per_metric.items():
                if name in ENVELOPE_CHECKED:
                    res.simulator_truth = envelope_truth(res, sim, wl, ENVELOPE_CHECKED[name], modes, arrival, seed,
                                                         _windows(doc, wl), memos.setdefault(wl, {}))
        rates = [p.rate for ps in d.points.values() for p in ps]
        for wl, per in d.capacity.items():
            slos = [(f"{s.key}_p{s.percentile:g}", s.limit_ms) for s in d.slos]
            for label, c in per.items():
                if label not in modes:
                    continue
                true = known_capacity(sim, wl, modes[label], slos, lo=min(rates) / 4, hi=max(rates) * 2,
                                      arrival=arrival, seed=seed, requests=requests, memo=memos.setdefault(wl, {}))
                c.simulator_truth = _capacity_checked(c, true)
        for wl, per in d.saturation.items():
            for label, s in per.items():
                if label in modes and s.at is not None:
                    lo = s.kept or s.at / 4
                    s.truth = known_saturation(sim, wl, modes[label], lo * 0.8, s.at * 1.25, arrival=arrival,
                                               seed=seed, requests=requests)
    except LoadgenError as exc:  # a workload the simulator cannot recompute (a file): say so, keep the run
        d.simulator_truth_error = str(exc)


def _windows(doc: dict, wl: str) -> dict[float, tuple[float, float]]:
    """Per rate, the (warm-up, window) seconds its stages of ``wl`` ran: where the schedule's truth is summarised."""
    warm = float((doc.get("run", {}).get("settings") or {}).get("warmup") or 0.0)
    return {float(s["rate"]): (warm, float(s["window"]["duration_s"])) for s in doc.get("stages", [])
            if s.get("rate") is not None and s.get("workload", wl) == wl and (s.get("window") or {}).get("duration_s")}


def envelope_truth(res: ConfigsResult, sim: dict, wl: str, sim_metric: str, modes: dict, arrival: str, seed: int,
                   windows: dict[float, tuple[float, float]], memo: dict,
                   margin: float = DEFAULT_MARGIN) -> list[Checked]:
    """Per adaptive configuration and rate: the simulator's own gap to its own envelope (the best fixed mode by its
    truth at that rate, for the very schedule the run sent) against the reported gap's joint interval."""
    out = []
    fixed = [x for x in res.labels if x not in res.adaptive and x in modes]
    for x in (a for a in res.adaptive if a in modes):
        for at in res.at:
            g = at.shortfall.get(x)
            rate = at.concurrency
            if not fixed or g is None or g.ci_low is None or rate not in windows:
                continue
            w0, w = windows[rate]
            truth = {y: known_rate_metric(sim, wl, modes[y], rate, sim_metric, arrival=arrival, seed=seed,
                                          warmup_s=w0, window_s=w, memo=memo) for y in [*fixed, x]}
            if any(v is None for v in truth.values()):
                continue
            pick = min if not res.higher_is_better else max
            best = pick(fixed, key=lambda y: truth[y])
            true = truth[x] / truth[best] - 1
            inside = g.ci_low <= true <= g.ci_high
            # the wall clock's own noise (a loaded host's timers) moves a mode by a few tenths of a percent that
            # the schedule's virtual-time truth does not have: within the practical margin of the interval is
            # not a miss of the decision (a tie below it, analysis.crossover §3), and is said as such
            near = not inside and g.ci_low - margin <= true <= g.ci_high + margin
            where = ("inside the reported interval" if inside else
                     f"within {margin * 100:g} % of the reported interval" if near else "outside the reported interval")
            out.append(Checked("✓" if inside else "≈" if near else "✗",
                               f"at {rate:.3g} req/s the simulator's own gap to its envelope ({best}) on this "
                               f"schedule: {true * 100:+.1f} % ({where})", true, inside or near, label=x, at=rate,
                               envelope=best))
    return out


def _crossing_checked(k) -> Checked:
    if k.true is None:
        return Checked("✗", f"the simulator itself has no crossover between {k.searched[0]:.3g} and "
                            f"{k.searched[1]:.3g} req/s: {k.reported:.3g} is a false alarm", None, False)
    where = "inside" if k.covered else "outside"
    return Checked("✓" if k.covered else "✗", f"the simulator's own crossover for this traffic: {k.true:.3g} req/s "
                                               f"({where} the reported interval)", k.true, k.covered)


def _capacity_checked(c: Capacity, true: float | None) -> Checked:
    """✓ where loadgen's estimate is within ±15 % of the simulator's own capacity (CLOSE), ✗ beyond; "·" with no
    estimate to check, "?" where the simulator itself meets the SLOs at no rate searched."""
    if true is None:
        return Checked("?", "the simulator itself fails the SLOs at every rate searched", None, False)
    if c.estimate is None:
        return Checked("·", f"the simulator's own capacity: {true:.3g} req/s", true, False)
    err = c.estimate / true - 1
    inside = c.ci_low <= true <= c.ci_high
    ok = abs(err) <= CLOSE
    return Checked("✓" if ok else "✗", f"the simulator's own capacity: {true:.3g} req/s (loadgen's estimate "
                                       f"{err * 100:+.0f} %, {'inside' if inside else 'outside'} its interval)",
                   true, ok)
