"""The scripted two-target ramp: the same ladder and prompts for a baseline and a speculative server.

Stages alternate between the targets at each concurrency (A@1, B@1, A@2, …)
so slow drift hits both alike, and both see the same prompt sequence (same
seed per stage). When targets are started by loadgen itself (one GPU box), the
order is instead every stage of one server, then every stage of the other.
Each stage's result is written the moment it ends.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from loadgen.errors import LoadgenError
from loadgen.run.orchestrate import ManagedServer, ServerCommand
from loadgen.run.probe import probe_sync
from loadgen.run.progress import ProgressLine
from loadgen.run.results import ResultsWriter
from loadgen.run.servermetrics import WindowCounters
from loadgen.run.runner import Interrupted, RequestSource, RunOptions, StageSpec, WindowProbe, run_stage_processes
from loadgen.client.target import Target


@dataclass
class RampPlan:
    targets: list[Target]
    """Baseline first, speculative second."""
    ladder: list[int]
    workloads: list[str]
    make_source: Callable[[str], RequestSource]
    opts: RunOptions
    duration_s: float | None = 30.0
    requests: int | None = None
    warmup_s: float = 5.0
    processes: int = 1
    loop: str = "auto"
    commands: dict[str, ServerCommand] = field(default_factory=dict)
    """label → how to start that target's server (optional)."""
    max_stage_s: float | None = None
    """--max-stage-time: no stage runs longer (cut where it is, kept, noted)."""
    max_run_s: float | None = None
    """--max-run-time: the run's budget, shared out between the stages still to run."""
    adapt_window: bool = False
    """The window was not chosen by the user: it grows to a request's duration, within the budget."""
    window_probe: Callable[[Target], WindowProbe | None] | None = None
    """target → what watches its server at the window's edges; default: its /metrics counters."""

    def stages(self) -> list[tuple[str, int, Target]]:
        order = [(w, c, t) for w in self.workloads for c in self.ladder for t in self.targets]
        if self.commands:
            rank = {t.label: i for i, t in enumerate(self.targets)}
            order.sort(key=lambda x: rank[x[2].label])  # stable: workload and ladder order kept
        return order


def log(msg: str) -> None:
    print(f"loadgen: {msg}", file=sys.stderr, flush=True)


def _fmt_s(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


class _Durations:
    """Each (target, workload)'s measured E2E p50 by concurrency, and the guesses made from them."""

    def __init__(self) -> None:
        self.measured: dict[tuple[str, str], dict[int, float]] = {}

    def add(self, target: str, workload: str, c: int, e2e_s: float) -> None:
        self.measured.setdefault((target, workload), {})[c] = e2e_s

    def guess(self, target: str, workload: str, c: int, scaled: bool = True) -> float | None:
        """``scaled``: Little's law from the nearest lower stage (a server whose throughput stops growing);
        else that stage's duration as it was (a server that keeps up): the two ends of the estimate."""
        own = e2e_guess(self.measured.get((target, workload), {}), c, scaled)
        if own is not None:
            return own
        # another target on the same workload is a better guess than none (for the estimate only)
        others = [e2e_guess(m, c, scaled) for (t, w), m in self.measured.items() if w == workload and m]
        return max(others) if others else None



def run_ramp(plan: RampPlan, writer: ResultsWriter, *, extra_stages: list[tuple[str, int]] = ()) -> list[dict]:
    """Run every stage of the plan (then ``extra_stages`` (workload, C) for both targets); returns the stage dicts.

    Before the first stage the run's duration is estimated and printed; each
    stage's header and progress line say how much is left. With ``max_run_s``
    each stage gets the share of the time left that its estimate is of the
    stages left (a stage that spends its share is cut and the ladder goes on;
    one that needs less leaves more for the rest); when the budget is spent the
    run stops, and ``run["cut"]`` says how many planned stages were not run.
    """
    done: list[dict] = []
    running: dict[str, ManagedServer] = {}
    servers = writer.run.setdefault("servers", {})
    sources = {w: plan.make_source(w) for w in plan.workloads}
    stages = plan.stages() + [(w, c, t) for w, c in extra_stages for t in plan.targets]
    planned = writer.run.setdefault("planned_stages", [])
    planned += [{"workload": w, "concurrency": c, "target": t.label} for w, c, t in stages]
    writer.run.setdefault("cut", None)
    durations = _Durations()
    for d in writer.stages:  # refinement rounds: what earlier rounds measured
        wl = next(iter(d.get("workloads", {})), None)
        if wl and d.get("e2e", {}).get("p50") and not d.get("incomplete"):
            durations.add(d["target"], wl, d["concurrency"], d["e2e"]["p50"] / 1000)
    index0 = len(writer.stages)
    t_start = time.monotonic()
    run_deadline = t_start + plan.max_run_s if plan.max_run_s else None

    def spec_for(i: int, budget: float | None = None, by: str = "max-stage-time", scaled: bool = True) -> StageSpec:
        wl, c, target = stages[i]
        return warmed_spec(c, plan.warmup_s, durations.guess(target.label, wl, c, scaled), duration_s=plan.duration_s,
                           requests=plan.requests, adapt_window=plan.adapt_window, max_stage_s=budget,
                           budget_by=by)

    def estimates(first: int, scaled: bool = True) -> list[float]:
        return [spec_for(j, plan.max_stage_s, scaled=scaled).estimate_s() for j in range(first, len(stages))]

    def left(first: int, this: StageSpec | None = None) -> str:
        """The time the stages from ``first`` on should take: from a server that keeps up with the
        load to one whose throughput stops growing (requests then last C/C' as long)."""
        lo, hi = sum(estimates(first, scaled=False)), sum(estimates(first))
        if this is not None:
            lo, hi = lo - estimates(first, scaled=False)[0] + this.estimate_s(), hi - estimates(first)[0] + this.estimate_s()
        return _fmt_s(hi) if hi <= 1.1 * lo else f"{_fmt_s(lo)}-{_fmt_s(hi)}"

    known = all(durations.guess(t.label, w, c) is not None for w, c, t in stages)
    log(f"{len(stages)} stages, estimated {left(0)}"
        + ("" if known else " or more (request durations are not known before the first stages; "
                            "the estimate is refined as they are measured)")
        + (f"; at most {_fmt_s(plan.max_run_s)} (--max-run-time)" if plan.max_run_s else ""))
    i = 0
    try:
        for i, (wl, c, target) in enumerate(stages):
            budget, by = plan.max_stage_s, "max-stage-time"
            if run_deadline is not None:
                remaining = run_deadline - time.monotonic()
                # weights: the middle of each stage's estimate (the pessimistic end alone gave the high
                # concurrencies so much that a 20-stage GPU ladder's first stages were starved)
                rest = [(a + b) / 2 for a, b in zip(estimates(i), estimates(i, scaled=False))]
                share = remaining * rest[0] / sum(rest) if sum(rest) > 0 else remaining
                # a stage needs its minimum warm-up and a second of window to measure anything
                least = plan.warmup_s + 1.0
                share = max(share, least)
                if remaining < least:
                    writer.run["cut"] = {"by": "max-run-time", "stages_not_run": len(stages) - i}
                    log(f"--max-run-time reached: {len(stages) - i} planned stage(s) not run")
                    break
                if budget is None or share < budget:
                    budget, by = max(1.0, share), "max-run-time"
            _ensure_up(plan, target, running, servers,
                       None if run_deadline is None else max(1.0, run_deadline - time.monotonic()))
            if wl not in sources:
                sources[wl] = plan.make_source(wl)
            spec = spec_for(i, budget, by)
            after = sum(estimates(i + 1)) if i + 1 < len(stages) else 0.0
            log(f"[{i + 1}/{len(stages)}] {target.label} C={c} workload={wl} "
                f"(elapsed {_fmt_s(time.monotonic() - t_start)}, about {left(i, spec)} left)")
            line = ProgressLine(f"{target.label} C={c}", after_s=after)
            probe = plan.window_probe(target) if plan.window_probe is not None else WindowCounters(target.url)
            try:
                res = run_stage_processes(target, spec, sources[wl], plan.opts, processes=plan.processes,
                                          stage_index=index0 + i, loop_kind=plan.loop, progress=line,
                                          window_probe=probe)
            except Interrupted as exc:
                line.done()
                if exc.partial is not None:
                    writer.add_stage(exc.partial)  # kept, marked incomplete; analyses skip it
                writer.run["cut"] = {"by": "interrupt", "stages_not_run": len(stages) - i - 1}
                raise
            line.done()
            d = writer.add_stage(res)
            d_req = d["requests"]
            log(f"    {d_req['completed']} ok, {d_req['failed']} failed, {d['output_tokens_per_s']:.1f} tok/s, "
                f"TTFT p50 {d['ttft'].get('p50', float('nan')):.1f} ms"
                + (" [client-bound]" if d["client"]["client_bound"] else "")
                + (f" [cut in the {d['cut']['phase']}: {d['cut']['by']}]" if d.get("cut") else ""))
            for note in d["notes"]:
                log(f"    note: {note}")
            done.append(d)
            if d["e2e"].get("p50") and not d.get("incomplete"):
                durations.add(target.label, wl, c, d["e2e"]["p50"] / 1000)
            if run_deadline is not None and time.monotonic() >= run_deadline - plan.warmup_s - 1.0 and i + 1 < len(stages):
                # only the run's end stops it: a stage that spent its share is cut and the ladder goes on
                writer.run["cut"] = {"by": "max-run-time", "stages_not_run": len(stages) - i - 1}
                log(f"--max-run-time reached: {len(stages) - i - 1} planned stage(s) not run")
                break
    except LoadgenError as exc:  # e.g. a server that never became healthy: the stages before it are kept
        writer.run["cut"] = {"by": "error", "stages_not_run": len(stages) - i, "error": str(exc)}
        raise
    finally:
        for srv in running.values():
            srv.stop()
        writer.flush()
    return done


def e2e_guess(measured: dict[int, float], concurrency: int, scaled: bool = True) -> float | None:
    """A request's duration at ``concurrency``, from the E2E p50 (s) of this target's stages so far.

    From the nearest lower concurrency C' it is scaled by C / C': by Little's law
    that is exact once the server is saturated (requests queue behind its
    running cap), and an overestimate before, which costs warm-up time only. The
    unscaled guess fell short: at C=250 behind a 48-request cap, 107 of 250
    users had not finished a first request when the window opened. Without a
    lower stage (refinement between ladder stages), the nearest higher one.
    ``scaled=False``: the lower stage's duration as it was (a server that keeps up: the estimate's low end).
    """
    if not measured:
        return None
    lower = [c for c in measured if c <= concurrency]
    if lower:
        c = max(lower)
        return measured[c] * concurrency / c if scaled else measured[c]
    return measured[min(measured)]


NO_GUESS_MAX_WARMUP_S = 120.0
"""The warm-up's cap for a stage with no request duration to go by (a target's first stage): its
steadiness decides. Capped at the minimum warm-up, the H200's first stage at C=256 opened its window
3 s in, with all 256 users still in their first, lock-step request."""


def warmed_spec(concurrency: int, warmup_s: float, last_e2e_s: float | None, *, duration_s: float | None = 30.0,
                requests: int | None = None, adapt_window: bool = False, max_stage_s: float | None = None,
                budget_by: str = "max-stage-time") -> StageSpec:
    """A stage whose users start spread over one request's duration, and a warm-up that ends once the
    load is measured steady.

    ``last_e2e_s``: that duration, as :func:`e2e_guess` makes it. The warm-up
    lasts at least ``warmup_s`` and until every user has started and the token
    rate has settled (runner.Steadiness); its cap is the old fixed rule, the
    ramp and then the last user's first request with room for it to take half
    as long again as guessed (measured: at C=250 the baseline's requests took
    2.8x C=100's, not 2.5x). With ``adapt_window`` a window shorter than one
    request grows to one request, as far as ``max_stage_s`` leaves room.
    """
    d = last_e2e_s or 0.0
    ramp = d if concurrency > 1 else 0.0
    window = duration_s
    if adapt_window and duration_s is not None and d > duration_s:
        window = d
        if max_stage_s:
            window = max(duration_s, min(d, max_stage_s - max(warmup_s, ramp + 2.0) - d))
    return StageSpec(concurrency, duration_s=window, requests=requests, warmup_s=warmup_s,
                     max_warmup_s=max(warmup_s, 2.5 * d if d else NO_GUESS_MAX_WARMUP_S), ramp_s=ramp,
                     max_stage_s=max_stage_s,
                     budget_by=budget_by, expected_request_s=d or None)

def _ensure_up(plan: RampPlan, target: Target, running: dict, servers: dict, within_s: float | None = None) -> None:
    """Start the target's server if loadgen starts it (stopping the other: one at a time), and probe it.

    ``within_s``: what is left of the run's budget; a server's start may take no longer."""
    cmd = plan.commands.get(target.label)
    if cmd is not None and within_s is not None and within_s < cmd.startup_timeout_s:
        cmd = dataclasses.replace(cmd, startup_timeout_s=within_s)
    if cmd is not None and target.label not in running:
        for label, srv in list(running.items()):  # one GPU box: one server at a time
            log(f"stopping {label}")
            srv.stop()
            del running[label]
        log(f"starting {target.label}: waiting for {cmd.health_url}")
        srv = ManagedServer(cmd)
        srv.start()
        running[target.label] = srv
    if target.label not in servers:
        found = probe_sync(target.url)
        servers[target.label] = found.to_dict()
        if found.engine == "sglang" and target.protocol != "sglang":
            target.spec_details = True
