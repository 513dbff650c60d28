"""The scripted two-target ramp: the same ladder and prompts for a baseline and a speculative server.

Stages alternate between the targets at each concurrency (A@1, B@1, A@2, …)
so slow drift hits both alike, and both see the same prompt sequence (same
seed per stage). When targets are started by loadgen itself (one GPU box), the
order is instead every stage of one server, then every stage of the other.
Each stage's result is written the moment it ends.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from loadgen.orchestrate import ManagedServer, ServerCommand
from loadgen.probe import probe_sync
from loadgen.progress import ProgressLine
from loadgen.results import ResultsWriter
from loadgen.runner import Interrupted, RequestSource, RunOptions, StageSpec, run_stage_processes
from loadgen.target import Target


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

    def stages(self) -> list[tuple[str, int, Target]]:
        order = [(w, c, t) for w in self.workloads for c in self.ladder for t in self.targets]
        if self.commands:
            rank = {t.label: i for i, t in enumerate(self.targets)}
            order.sort(key=lambda x: rank[x[2].label])  # stable: workload and ladder order kept
        return order


def log(msg: str) -> None:
    print(f"loadgen: {msg}", file=sys.stderr, flush=True)


def run_ramp(plan: RampPlan, writer: ResultsWriter, *, extra_stages: list[tuple[str, int]] = ()) -> list[dict]:
    """Run every stage of the plan (then ``extra_stages`` (workload, C) for both targets); returns the stage dicts."""
    done: list[dict] = []
    running: dict[str, ManagedServer] = {}
    servers = writer.run.setdefault("servers", {})
    sources = {w: plan.make_source(w) for w in plan.workloads}
    stages = plan.stages() + [(w, c, t) for w, c in extra_stages for t in plan.targets]
    e2e: dict[tuple[str, str], dict[int, float]] = {}
    index0 = len(writer.stages)
    t_start = time.monotonic()
    try:
        for i, (wl, c, target) in enumerate(stages):
            _ensure_up(plan, target, running, servers)
            if wl not in sources:
                sources[wl] = plan.make_source(wl)
            spec = warmed_spec(c, plan.warmup_s, e2e_guess(e2e.get((target.label, wl), {}), c),
                               duration_s=plan.duration_s, requests=plan.requests)
            log(f"[{i + 1}/{len(stages)}] {target.label} C={c} workload={wl} "
                f"(elapsed {time.monotonic() - t_start:.0f} s)")
            line = ProgressLine(f"{target.label} C={c}")
            try:
                res = run_stage_processes(target, spec, sources[wl], plan.opts, processes=plan.processes,
                                          stage_index=index0 + i, loop_kind=plan.loop, progress=line)
            except Interrupted as exc:
                line.done()
                if exc.partial is not None:
                    writer.add_stage(exc.partial)  # kept, marked incomplete; analyses skip it
                raise
            line.done()
            d = writer.add_stage(res)
            d_req = d["requests"]
            log(f"    {d_req['completed']} ok, {d_req['failed']} failed, {d['output_tokens_per_s']:.1f} tok/s, "
                f"TTFT p50 {d['ttft'].get('p50', float('nan')):.1f} ms"
                + (" [client-bound]" if d["client"]["client_bound"] else ""))
            done.append(d)
            if d["e2e"].get("p50"):
                e2e.setdefault((target.label, wl), {})[c] = d["e2e"]["p50"] / 1000
    finally:
        for srv in running.values():
            srv.stop()
    return done


def e2e_guess(measured: dict[int, float], concurrency: int) -> float | None:
    """A request's duration at ``concurrency``, from the E2E p50 (s) of this target's stages so far.

    From the nearest lower concurrency C' it is scaled by C / C': by Little's law
    that is exact once the server is saturated (requests queue behind its
    running cap), and an overestimate before, which costs warm-up time only. The
    unscaled guess fell short: at C=250 behind a 48-request cap, 107 of 250
    users had not finished a first request when the window opened. Without a
    lower stage (refinement between ladder stages), the nearest higher one.
    """
    if not measured:
        return None
    lower = [c for c in measured if c <= concurrency]
    if lower:
        c = max(lower)
        return measured[c] * concurrency / c
    return measured[min(measured)]


def warmed_spec(concurrency: int, warmup_s: float, last_e2e_s: float | None, **kw) -> StageSpec:
    """A stage whose users start spread over one request's duration, and a warm-up that covers it.

    ``last_e2e_s``: that duration, as :func:`e2e_guess` makes it (the stage
    notes say when the window opened before every user had finished a first request).
    """
    d = last_e2e_s or 0.0
    # the ramp, then the last user's first request, with room for it to take half as long again as
    # guessed (measured: at C=250 the baseline's requests took 2.8x C=100's, not 2.5x)
    return StageSpec(concurrency, warmup_s=max(warmup_s, 2.5 * d), ramp_s=d if concurrency > 1 else 0.0, **kw)


def _ensure_up(plan: RampPlan, target: Target, running: dict, servers: dict) -> None:
    cmd = plan.commands.get(target.label)
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
