"""The conductor: the ramp's stages in order, who runs them, merging and writing results.

Lives where the LoadTestShape runs (the local runner, or the master). For each
stage it sends a :class:`StagePlan` to the load processes (directly to the
local executor, or as a ``loadgen_stage`` message to every worker), tells the
shape how many users to run, waits for every process's stage result, merges
them exactly (``StageResult.merge``: HDR histograms, counters and timelines
add) and writes the merged stage with ``ResultsWriter`` before the next stage
begins. Order: loadgen.run.order.stage_order, the order ``loadgen crossover`` takes too: two targets
alternate (A@C1, B@C1, A@C2, B@C2, ...) so drift hits both alike; three or more rotate through a
Williams design's rows (A B C @C1, B C A @C2, ...: none always first, last or behind a given other).
Every target's stage at one concurrency uses the same prompt seed (the same request sequence).

The results document says which configurations it compares, as ``loadgen crossover`` writes them:
``roles`` (the reference and the first candidate) and ``configurations`` (the reference, the
candidates, and the adaptive ones: ``adaptive = true`` targets, or a simulator mode its profile marks
adaptive), so ``loadgen crossover --from OUT/ramp.json`` gives the N-configuration analysis.

Open loop (``--rate``): the ladder's values are rates, in the same stage order and with the same
prompt seeds; each process runs one dispatcher (loadgen/locust/live.py) that sends its share of
the one schedule (process k of n: arrivals k, k+n, …), so the shape asks Locust for no users at all.

A worker that goes missing (Locust's heartbeat) or never reports: the master
logs it, merges the other workers' data, and marks the stage incomplete. A worker that joins while a
stage's window is still ahead or open starts that stage over on every worker (see ``_joined``).

The server's own view (loadgen/locust/serverside.py): the conductor alone scrapes each stage's
target around its window (``--server-metrics-interval``) and, with ``--reset-cache``, empties its
prefix cache before the stage; the merged stage gets ``server`` and ``cache_reset`` as a
``loadgen run`` stage does.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import orjson

from loadgen import redact
from loadgen.errors import LoadgenError
from loadgen.run import stops
from loadgen.run.order import stage_order
from loadgen.run.stops import Deadline, Saturation
from loadgen.run.results import ResultsWriter
from loadgen.stage.result import StageAccumulator, StageResult
from loadgen.report.table import stage_table

from loadgen.settings.config import RampConfig, TargetConf
from loadgen.locust.serverside import StageServer, probe_info, reset_before
from loadgen.locust.stageplan import StagePlan

log = logging.getLogger("loadgen.locust")

START_LEAD_S = 1.0
"""Distributed stages start this long after the plan is sent: time for workers to warm their pools."""
SPAWN_S = 0.5
"""Locust spawns a stage's users within this long; they start together after it (START_LEAD_S when distributed)."""
READY_WAIT_S = 10.0
"""How long a connected worker may take to say its loadgen handlers are ready (it reports at once, then every
3 s) before stages go on without it."""
REPORT_GRACE_S = 30.0
"""How long after a stage should have ended a silent worker is given before it counts as lost."""


def open_rates(cfg: RampConfig) -> tuple[float, ...] | None:
    """The open-loop ladder (--rate, req/s), or None for a concurrency ramp."""
    return tuple(cfg.rate) if cfg.rate else None


def build_plans(cfg: RampConfig, targets: list[TargetConf], run_id: str = "") -> list[StagePlan]:
    """The ramp's stages, in the one stage order of loadgen/run/order.py (A@C1, B@C1, A@C2, … for two; a
    Williams rotation for three or more), each with its fixed warm-up plan (order.fixed_spec: Locust spawns a
    stage's users together). With ``--rate`` the ladder's values are rates in that same order: every
    target at a rate gets the same schedule (seeded by the run's seed and the rate) and the same prompts
    (seed + step); each stage's concurrency is then the in-flight cap (0: none)."""
    rates = open_rates(cfg)
    cap = int(cfg.max_in_flight or 0)
    knobs = cfg.stage_knobs()
    return [StagePlan(index=slot.index, step=slot.step, target=slot.target.as_dict(),
                      concurrency=cap if rates else slot.value, knobs=knobs, workload=slot.workload,
                      repeat=slot.repeat if cfg.repeat > 1 else None, run_id=run_id,
                      rate=float(slot.value) if rates else None)
            for slot in ramp_slots(cfg, targets)]


def ramp_slots(cfg: RampConfig, targets: list[TargetConf]) -> list:
    """The ramp's stages in the one stage order (loadgen.run.order.stage_order): what the stop conditions read."""
    rates = open_rates(cfg)
    repeats = cfg.repeat
    if repeats > 1 and rates:
        raise LoadgenError("run.repeat is for a ladder of concurrencies: the rate analysis reads one stage per rate")
    return list(stage_order(targets, rates or cfg.ladder, [cfg.workload], axis="rate" if rates else "concurrency",
                            repeats=repeats))


def open_meta(cfg: RampConfig, rates: tuple[float, ...] | None) -> dict:
    """The results document's ``open_loop`` block, as ``loadgen run --rate`` writes it (its axis, how the
    schedule was drawn); nothing for a concurrency ramp."""
    if not rates:
        return {}
    return {"open_loop": {"axis": "rate", "arrival": cfg.arrival, "max_in_flight": cfg.max_in_flight,
                          "max_dispatch_lag_ms": cfg.max_dispatch_lag_ms, "trace": None,
                          "ladder": list(rates)}}


def configurations(targets: list[TargetConf]) -> dict:
    """``roles`` and ``configurations`` of the results document, as ``loadgen crossover`` writes them (the
    analysis reads them: analysis/compare.configurations); nothing for a one-target ramp, which compares none."""
    labels = [t.label for t in targets]
    if len(labels) < 2:
        return {}
    return {"roles": {"baseline": labels[0], "spec": labels[1]},
            "configurations": {"reference": labels[0], "candidates": labels[1:],
                               "adaptive": [t.label for t in targets if t.adaptive]}}


class _Running:
    def __init__(self, plan: StagePlan, expected: dict[str, int]) -> None:
        self.plan = plan
        self.expected = expected  # worker id → share index
        self.parts: dict[str, dict] = {}
        self.lost: dict[str, str] = {}  # worker id → why
        self.begun = time.monotonic()
        self.server: StageServer | None = None
        self.reset: dict | None = None
        self.notes: list[str] = []
        """Said in the written stage (a start-over, and why)."""

    @property
    def pending(self) -> list[str]:
        return [w for w in self.expected if w not in self.parts and w not in self.lost]

    def deadline(self) -> float:
        k = self.plan.knobs
        length = k.duration_s if k.duration_s is not None else 60.0
        return self.begun + START_LEAD_S + k.warmup_s + length + k.max_cooldown_s + REPORT_GRACE_S


class Conductor:
    def __init__(self, environment, cfg: RampConfig, targets: list[TargetConf], *, executor=None,
                 meta: dict | None = None, cpus: list[int] | None = None) -> None:
        self.env = environment
        self.cfg = cfg
        self.targets = targets
        self.executor = executor
        """The local executor (local runner); None on a master."""
        self.meta = dict(meta or {})
        self.cpus = cpus
        self.runs = 0
        self.run_id = ""
        self.plans: list[StagePlan] = []
        self.pos = 0
        self.cur: _Running | None = None
        self.stages: list[dict] = []
        self.writer: ResultsWriter | None = None
        self.finished = False
        self.aborted = False
        self._last_workers: tuple[str, ...] = ()
        self._nudge = False
        self._waiting_logged = ""
        self._ready: set[str] = set()
        """Workers whose loadgen handlers are registered (distributed.READY_KEY)."""
        self._unready_since: dict[str, float] = {}
        self._given_up: set[str] = set()
        self._next_notes: list[str] = []
        """Said in the next stage begun: the start-over of the one it repeats, and why."""
        self.refresh = None
        """cfg → cfg: the options as they are now, for a new run started from the web UI."""
        self.probed: dict[str, dict] = {}
        """Target label → what its server said about itself (engine, running cap), asked once per run."""
        self.slots: list = []
        self.stops: list[stops.Stop] = []

    # --- run lifecycle --------------------------------------------------------------------------
    @property
    def distributed(self) -> bool:
        return self.executor is None

    def new_run(self) -> None:
        """Called when a test starts (headless start, or the web UI's start button)."""
        self.runs += 1
        self.run_id = uuid.uuid4().hex[:12]
        self.plans = build_plans(self.cfg, self.targets, self.run_id)
        self.slots = ramp_slots(self.cfg, self.targets)
        lead = SPAWN_S + (START_LEAD_S if self.distributed else 0.0)
        # the ramp's stop conditions, as the scripted ramp's (run/stops.py); a Locust stage's length is its plan's
        self.stops: list[stops.Stop] = [
            Saturation(self.cfg.past_saturation),
            Deadline(self.cfg.max_run_s, time.monotonic(),
                     lambda i: lead + self.cfg.warmup_s + (self.cfg.duration_s or 0.0), len(self.plans))]
        self.pos = 0
        self.cur = None
        self.stages = []
        self.finished = False
        self.aborted = False
        self.probed = {}
        rates = open_rates(self.cfg)
        name = "ramp.json" if self.runs == 1 else f"ramp-{self.runs}.json"
        meta = {
            "command": "locust ramp",
            "argv": sys.argv[1:],
            "config": self.cfg.source,
            "workload": self.cfg.workload,
            "seed": self.cfg.seed,
            "ladder": list(rates or self.cfg.ladder),
            "order": [f"{p.label}@{p.rate:g}/s" if p.open_loop else f"{p.label}@{p.concurrency}" for p in self.plans],
            **open_meta(self.cfg, rates),
            "targets": [{k: v for k, v in t.as_dict().items() if k != "headers"} for t in self.targets],
            **configurations(self.targets),
            "locust": {"mode": "distributed" if self.distributed else "local"},
            **self.meta,
        }
        self.writer = ResultsWriter(Path(self.cfg.out) / name, meta)
        log.info("loadgen: %d stages (%s), results in %s", len(self.plans),
                 ", ".join(meta["order"][:6]) + (", ..." if len(self.plans) > 6 else ""), self.writer.path)

    def stop(self) -> None:
        """The test stopped (or quit) before the ramp ended: drop the running stage, close the file."""
        if self.writer is None or self.finished:
            return
        self.aborted = True
        if self.cur is not None:
            log.warning("loadgen: test stopped during stage %d/%d (%s %s); that stage is not written",
                        self.cur.plan.index + 1, len(self.plans), self.cur.plan.label, self.cur.plan.load_words)
            if self.executor is not None:
                self.executor.abort()
            else:
                self._broadcast("loadgen_abort", {"key": self.cur.plan.key})
            if self.cur.server is not None:
                self.cur.server.abort()
            self.cur = None
        self._finish(interrupted=True)

    def _finish(self, interrupted: bool) -> None:
        self.finished = True
        if self.writer is not None:
            self.writer.finish(interrupted=interrupted)
            if self.stages:
                print(stage_table(self.stages), flush=True)
            log.info("loadgen: results in %s (+ .csv, .hlog)%s", self.writer.path,
                     " — interrupted" if interrupted else "")

    # --- the shape's clock ----------------------------------------------------------------------
    def tick(self) -> tuple[int, float] | None:
        if self.writer is None or self.finished:
            if self.refresh is not None:  # options as they are now (the web UI form may have changed them)
                self.cfg = self.refresh(self.cfg)
            self.new_run()
        if self.cur is not None:
            self._check_lost()
            joined = self._joined()
            if joined:
                self._start_over(joined)
        if self.cur is not None:
            server = self.cur.server
            if not self.cur.pending and server is not None and not server.done and not server.opened:
                server.abort()  # every part is in and the window was never scraped: nothing to wait for
            if not self.cur.pending and (server is None or server.done):
                self._complete()
        if self.cur is None:
            while self.pos < len(self.plans) and not self._may_begin():
                pass
            if self.pos >= len(self.plans):
                self._finish(interrupted=False)
                return None
            if not self._begin(self.plans[self.pos]):
                return (0, 1.0)
        if self.cur.plan.open_loop:
            return (0, 1.0)  # no closed-loop user: each process's dispatcher sends on the schedule
        c = self.cur.plan.concurrency
        rate = c / self.cur.plan.spawn_s  # every user spawned before the stage's synchronised start
        return (c, rate + (0.001 if self._nudge else 0.0))

    def _may_begin(self) -> bool:
        """The stop conditions on the next stage: False when it is not run (written to ``run.not_run``, the next
        one is asked) or the ramp ends before it (``run.cut``: every stage left)."""
        plan, slot = self.plans[self.pos], self.slots[self.pos]
        decision = stops.before(self.stops, self.pos, slot)
        if decision.action == "stop":
            self._cut(len(self.plans) - self.pos)
            return False
        if decision.action == "skip":
            log.info("loadgen: stage %d/%d: %s %s: not run, %s", plan.index + 1, len(self.plans), plan.label,
                     plan.load_words, decision.said)
            self.writer.run.setdefault("not_run", []).append(
                {"target": plan.label, "workload": plan.workload, "value": slot.value, "why": decision.why,
                 **({} if plan.repeat is None else {"repeat": plan.repeat})})
            self.pos += 1
            return False
        return True

    def _cut(self, not_run: int) -> None:
        self.writer.run["cut"] = {"by": "max-run-time", "stages_not_run": not_run}
        log.info("loadgen: --max-run-time reached: %d planned stage(s) not run", not_run)
        self.pos = len(self.plans)

    def _begin(self, plan: StagePlan) -> bool:
        plan.spawn_s = SPAWN_S
        plan.host = socket.gethostname()
        plan.cpus = self.cpus
        # the master scrapes a window whose end it knows ahead (not one that closes on a request count)
        plan.scraped = plan.knobs.duration_s is not None
        if self.executor is not None:
            reset = self._reset(plan)
            plan.shares = {"local": 0}
            plan.start_at_ns = None
            self.cur = _Running(plan, dict(plan.shares))
            self.cur.reset = reset
            executor = self.executor
            self._watch(plan, lambda: executor.stage.window() if executor.stage is not None
                        and executor.stage.plan is plan else None,
                        lambda: executor.scrape_closed(plan.key))
            executor.begin(plan, 0, 1)
        else:
            workers = self._ready_workers(plan)
            if not workers:
                return False
            reset = self._reset(plan)
            plan.shares = {w: i for i, w in enumerate(workers)}
            plan.start_at_ns = time.perf_counter_ns() + int(START_LEAD_S * 1e9)
            if tuple(workers) != self._last_workers and self._last_workers:
                self._nudge = not self._nudge  # a changed worker set: make Locust re-dispatch the users
            self._last_workers = tuple(workers)
            self.cur = _Running(plan, dict(plan.shares))
            self.cur.reset = reset
            self.cur.notes, self._next_notes = self._next_notes, []
            # workers on this host start at start_at_ns and open their window a fixed warm-up later
            spec = plan.spec()
            ws = plan.start_at_ns + int(spec.warmup_s * 1e9)
            window = (ws, ws + int(spec.duration_s * 1e9)) if plan.scraped else None
            self._watch(plan, lambda: window,
                        lambda: self._broadcast("loadgen_scraped", {"key": plan.key}))
            self._broadcast("loadgen_stage", plan.to_msg())
        log.info("loadgen: stage %d/%d: %s %s (warm-up %gs, %s)%s", plan.index + 1, len(self.plans), plan.label,
                 plan.load_words, plan.knobs.warmup_s,
                 f"window {plan.knobs.duration_s:g}s" if plan.knobs.duration_s is not None
                 else f"{plan.knobs.requests} requests",
                 f" on {len(plan.shares)} workers" if self.distributed else "")
        return True

    def _joined(self) -> list[str]:
        """Workers that connected after the running stage began, while its window is still ahead or open.

        Locust 2.47 re-dispatches the users as soon as a worker connects to a running test (MasterRunner's
        ``client_ready``, with or without --enable-rebalancing): it moves users of the stage off the workers
        that have its plan to the new one, which has none, so they idle. Measured (ladder 2, 2 s window, a
        worker joining during baseline C=2): the server ran a median of 1 request at once (mean 1.25) over a
        window written as C=2 and complete, 5 requests and 436 tok/s (started over: 8 and 769 tok/s). Such a
        stage is started over on every worker, the new one too; a worker that joins once the window has
        closed (a part is in, or its end has passed) changes no figure: it waits for the next stage, as it
        does in an open-loop stage (no Locust users to move)."""
        cur = self.cur
        if self.executor is not None or cur.parts or cur.plan.open_loop:
            return []
        p, k = cur.plan, cur.plan.knobs
        if k.duration_s is not None and p.start_at_ns is not None:
            end = p.start_at_ns + int((k.warmup_s + k.duration_s) * 1e9)
            if time.perf_counter_ns() >= end:
                return []
        return [w for w in self._live_workers() if w not in cur.expected]

    def _start_over(self, joined: list[str]) -> None:
        cur = self.cur
        plan = replace(cur.plan, attempt=cur.plan.attempt + 1)  # a new key: a part of the old attempt is dropped
        names = ", ".join(self._worker_name(w) for w in joined)
        why = (f"started over: {names} joined before its window closed (Locust moves users to a worker that "
               "joins; the first attempt's figures are dropped)")
        log.warning("loadgen: stage %d/%d (%s %s) %s", plan.index + 1, len(self.plans), plan.label, plan.load_words,
                    why)
        if cur.server is not None:
            cur.server.abort()
        self._broadcast("loadgen_abort", {"key": cur.plan.key})
        self.cur = None
        self.plans[self.pos] = plan  # begun again once every worker, the new one too, is ready (tick)
        self._next_notes = cur.notes + [why]

    def _probed(self, plan: StagePlan) -> dict:
        if plan.label not in self.probed:
            self.probed[plan.label] = probe_info(plan.target["url"], plan.target.get("headers"))
        return self.probed[plan.label]

    def _reset(self, plan: StagePlan) -> dict | None:
        """--reset-cache: the target's prefix cache emptied once, by the master, before the stage."""
        return reset_before(plan, self._probed(plan)) if self.cfg.reset_cache else None

    def _watch(self, plan: StagePlan, window, on_closed) -> None:
        if plan.scraped:
            self.cur.server = StageServer(plan, self.cfg.server_metrics_interval, self._probed(plan), window,
                                          on_closed)

    def _broadcast(self, kind: str, data: dict) -> None:
        """To every worker whose loadgen handlers are registered (to another, Locust logs an unknown message)."""
        runner = self.env.runner
        for w in list(runner.clients.keys()):
            if w in self._ready:
                runner.send_message(kind, data, client_id=w)

    def ready(self, worker: str) -> None:
        self._ready.add(worker)

    def _ready_workers(self, plan: StagePlan) -> list[str]:
        """The workers a stage is shared among, [] while it must wait: none connected, or one connected whose
        loadgen handlers are not yet registered (its stage message would be dropped, and Locust has given it
        users already). One still not ready after READY_WAIT_S is named and left out."""
        workers = self._live_workers()
        now = time.monotonic()
        waiting = [w for w in workers if w not in self._ready
                   and now - self._unready_since.setdefault(w, now) < READY_WAIT_S]
        said = (f"no workers connected; waiting for workers before stage {plan.index + 1}" if not workers else
                f"waiting for {', '.join(map(self._worker_name, waiting))} to load loadgen before stage "
                f"{plan.index + 1}" if waiting else "")
        if said and said != self._waiting_logged:
            (log.warning if not workers else log.info)("loadgen: %s", said)
        self._waiting_logged = said
        if said:
            return []
        for w in workers:
            if w not in self._ready and w not in self._given_up:
                self._given_up.add(w)
                log.error("loadgen: %s connected but sent no loadgen report in %g s (is its locustfile "
                          "scenarios/ramp.py?); it gets no share of the stages", self._worker_name(w), READY_WAIT_S)
        return [w for w in workers if w in self._ready]

    def _live_workers(self) -> list[str]:
        from locust.runners import STATE_MISSING

        runner = self.env.runner
        alive = [c.id for c in runner.clients.values() if c.state != STATE_MISSING]
        return sorted(alive, key=runner.get_worker_index)

    def _worker_name(self, w: str) -> str:
        if w == "local":
            return "local process"
        try:
            return f"worker {self.env.runner.get_worker_index(w)} ({w})"
        except Exception:
            return f"worker {w}"

    # --- results ----------------------------------------------------------------------------------
    def add_part(self, item: dict) -> None:
        """A process's result for a stage (from the local executor, or a worker report)."""
        cur = self.cur
        if cur is None or item.get("key") != cur.plan.key:
            log.debug("loadgen: dropped a late stage result (%s)", item.get("key"))
            return
        w = item.get("worker", "?")
        if w not in cur.expected or w in cur.parts:
            return
        if w in cur.lost:  # reported after all (slow, not dead): take it
            del cur.lost[w]
        cur.parts[w] = item
        if self.cfg.keep_parts and self.writer is not None:
            folder = self.writer.path.parent / "parts"
            folder.mkdir(parents=True, exist_ok=True)
            safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in w)
            name = f"{self.writer.path.stem}-s{cur.plan.index:02d}-{cur.plan.label}-c{cur.plan.concurrency}-{safe}.json"
            (folder / name).write_bytes(orjson.dumps(redact.document(item)))

    def _check_lost(self) -> None:
        cur = self.cur
        if self.executor is not None:
            return
        from locust.runners import STATE_MISSING

        clients = self.env.runner.clients
        late = time.monotonic() > cur.deadline()
        for w in cur.pending:
            node = clients.get(w)
            why = None
            if node is None:
                why = "quit or was removed"
            elif node.state == STATE_MISSING:
                why = "went missing (no heartbeat)"
            elif late:
                why = "sent no result in time"
            if why:
                cur.lost[w] = why
                msg = (f"loadgen: {self._worker_name(w)} {why} during stage {cur.plan.index + 1} "
                       f"({cur.plan.label} {cur.plan.load_words}); keeping the other workers' data, "
                       "stage marked incomplete")
                log.error(msg)

    def _complete(self) -> None:
        cur, plan = self.cur, self.cur.plan
        results, notes = [], []
        for w in cur.expected:
            item = cur.parts.get(w)
            if item is None:
                notes.append(f"{self._worker_name(w)} {cur.lost.get(w, 'lost')}: its share is missing")
            elif item.get("error"):
                notes.append(f"{self._worker_name(w)} failed: {item['error']}")
            elif item.get("result"):
                results.append(StageResult.from_dict(item["result"]))
        if results:
            merged = results[0]
            for r in results[1:]:
                merged.merge(r)
        else:
            length = plan.knobs.duration_s or 1.0
            acc = StageAccumulator(0, int(length * 1e9), int((plan.knobs.bin_s or length / 20) * 1e9))
            merged = acc.result(target=plan.label, url=plan.target["url"], protocol=plan.target.get("protocol", ""),
                                concurrency=plan.concurrency, stage_index=plan.index)
            merged.processes = 0
        if notes:
            merged.incomplete = True
            merged.notes.extend(notes)
        merged.notes.extend(cur.notes)
        if cur.server is not None:
            cur.server.finish(merged, [(cur.parts.get(w) or {}).get("edges") for w in cur.expected],
                              socket.gethostname())
        elif not plan.scraped:
            merged.notes.append("server: not scraped: a window that closes on a request count ends at an "
                                "instant the master does not know ahead")
        if cur.reset is not None:
            merged.cache_reset = cur.reset
            if not cur.reset["ok"]:
                merged.notes.append(f"cache not reset before the stage: {cur.reset.get('error')}")
        if merged.total.started == 0 and "no request started inside the steady window" not in merged.notes:
            merged.notes.append("no request started inside the steady window")
        d = self.writer.add_stage(merged, **({} if plan.repeat is None else {"repeat": plan.repeat}))
        self.stages.append(d)
        log.info("loadgen: stage %d/%d done: %s %s: %d ok, %d failed, %.1f tok/s, TTFT p50 %s ms, "
                 "ITL p50 %s ms%s", plan.index + 1, len(self.plans), plan.label, plan.load_words,
                 d["requests"]["completed"], d["requests"]["failed"], d["output_tokens_per_s"],
                 _fmt(d["ttft"].get("p50")), _fmt(d["itl"].get("p50")),
                 " (INCOMPLETE)" if d.get("incomplete") else "")
        ol = d.get("open_loop")
        if ol:
            lag = (ol.get("dispatch_lag_ms") or {}).get("p99")
            log.info("loadgen:     open loop: %s planned, %s sent, dispatch lag p99 %s ms%s", ol.get("planned"),
                     ol.get("sent"), _fmt(lag), " (FLAGGED: the schedule was not kept)" if ol.get("lag_flagged") else "")
        end, said = stops.after(self.stops, self.pos, self.slots[self.pos], d)
        for line in said:
            log.info("loadgen:     %s", line)
        self.cur = None
        self.pos += 1
        if end:
            self._cut(len(self.plans) - self.pos)

    # --- for the web UI ---------------------------------------------------------------------------
    def status(self) -> dict:
        cur = None
        if self.cur is not None:
            p = self.cur.plan
            cur = {"index": p.index, "target": p.label, "concurrency": p.rate if p.open_loop else p.concurrency,
                   "rate": p.rate,
                   "phase": self._phase(), "elapsed_s": round(time.monotonic() - self.cur.begun, 1),
                   "reported": len(self.cur.parts), "expected": len(self.cur.expected)}
        return {
            "run": self.runs, "total_stages": len(self.plans), "finished": self.finished, "aborted": self.aborted,
            "results": str(self.writer.path) if self.writer else None,
            "targets": [t.label for t in self.targets], "ladder": list(open_rates(self.cfg) or self.cfg.ladder),
            "stages": [summary(d) for d in self.stages], "current": cur,
        }

    def _phase(self) -> str:
        cur = self.cur
        if self.executor is not None and self.executor.stage is not None:
            phase = self.executor.stage.phase
            return "writing results" if phase == "done" else phase
        k = cur.plan.knobs
        t = time.monotonic() - cur.begun - START_LEAD_S
        if t < 0:
            return "preparing"
        if t < k.warmup_s:
            return "warm-up"
        if k.duration_s is not None and t < k.warmup_s + k.duration_s:
            return "window"
        return "cool-down"


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def summary(d: dict) -> dict:
    """The figures the web UI shows for one written stage (no histograms)."""
    g = lambda m, k: d.get(m, {}).get(k)  # noqa: E731
    # an open-loop stage sits on the ladder at its rate (its concurrency is the in-flight cap): the web UI's
    # per-ladder-value table and chart read "concurrency"
    return {
        "index": d["stage_index"], "target": d["target"],
        "concurrency": d["rate"] if d.get("rate") is not None else d["concurrency"], "rate": d.get("rate"),
        "ttft_p50": g("ttft", "p50"), "ttft_p99": g("ttft", "p99"),
        "itl_p50": g("itl", "p50"), "itl_p99": g("itl", "p99"),
        "tokens_per_s": d.get("output_tokens_per_s"),
        "tokens_per_chunk": g("tokens_per_chunk", "mean"),
        "accept_length": g("accept_length", "mean"),
        "completed": d["requests"]["completed"], "failed": d["requests"]["failed"],
        "incomplete": bool(d.get("incomplete")), "client_bound": bool(d["client"]["client_bound"]),
        "processes": d["client"]["processes"], "speculation": speculation_words(d),
        "thrashing": bool((d.get("switching") or {}).get("oscillating")),
    }


def speculation_words(d: dict) -> str:
    """What the stream says speculation did in a stage's window, in a table cell (stage/switching.py): "-" where
    it showed none."""
    sw = d.get("switching") or {}
    if "switches" not in sw:
        return "-"
    judged = sw["on"] + sw["off"]
    on = f"on {100 * sw['on'] / judged:.0f} %" if judged else "mixed"
    if sw["oscillating"]:
        return f"thrashing: {sw['switches']} switches ({sw['per_s']:.2g}/s), {on}"
    return on + (f", {sw['switches']} switch{'es' if sw['switches'] > 1 else ''}" if sw["switches"] else "")

