"""The policy of N configurations written in the engines' own terms, where an engine has one.

In: the policy's steps in running-batch terms (a list of dicts, in C order, as crossover.json's
``configs[wl][metric]["policy"]``: ``labels`` — one best, or several that tie —, ``c_from`` / ``c_to``,
``batch_from`` / ``batch_to`` — the running batch the step's own server measured at its edges, a float
or analysis.serverview's BatchAt dict (``running``, ``why``, ``at_cap``, ``cap``), None at the open ends —,
optionally ``switch`` (its C interval) and ``batch_to_ci`` = [low, high]; at a boundary the speculative
side's batch is taken, since the setting runs on a speculative server), the run's
``reference`` label and ``servers`` (run.json's ``run.servers``: label → what loadgen's probe found,
``engine`` and ``server_info``). Out: a :class:`Translation`: the :class:`EngineTerm` of every engine
that can express the policy on one server, and one line per reason it cannot.

What the engines read (upstream source, as of this writing):

- SGLang ``--speculative-adaptive --speculative-adaptive-config FILE``
  (``python/sglang/srt/speculative/adaptive_spec_params.py``): a JSON object whose integer-string
  keys are batch-size lower bounds, each ``{"candidate_steps": [...]}`` (+ optional EMA knobs); a
  batch uses the largest key ≤ its size, after padding the size up to the next captured CUDA-graph
  batch size (``adaptive_step_router.py``); steps 0 turns drafting off; each tier runs with
  ``num_draft_tokens = steps + 1``. Only EAGLE/EAGLE3 with ``speculative_eagle_topk`` 1 (else SGLang
  silently keeps static settings: ``adaptive_unsupported_reason``). A single candidate per tier
  pins the steps, so the EMA has nothing to choose. Batch-size keys came with PR #24055; builds with
  only PR #21599 read a flat ``{"candidate_steps": [...]}`` and cannot key by batch size.
- vLLM ``--speculative-config`` key ``num_speculative_tokens_per_batch_size``
  (``vllm/config/speculative.py``; checked by ``vllm/v1/spec_decode/dynamic/utils.py``, PR #32374):
  a list of ``[bs_lo, bs_hi, K]`` with inclusive, sorted, non-overlapping ranges starting at 1;
  K 0 is allowed, each K is clamped to ``num_speculative_tokens`` (the launch maximum, > 0), and a
  gap or a batch above the last range keeps the previous K. ``vllm bench sweep tune_speculative_k``
  writes the same list. The batch is the number of requests scheduled in the step.
- llama.cpp: no load-dependent draft setting (draft sizes are fixed at launch).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

SGLANG_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
VLLM_LAST_RANGE_END = 1024
"""The end of vLLM's last range when the server's max_num_seqs is unknown (vLLM keeps the last K beyond it)."""


@dataclass
class EngineTerm:
    """The policy as one engine's setting: ``config`` is what the engine reads (a JSON file's text, or
    a ``--speculative-config`` value), ``flags`` the launch flags that go with it, ``text`` one sentence,
    ``caveat`` what the setting does not reproduce of the measured configurations."""

    engine: str
    text: str
    config: str
    caveat: str
    flags: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Translation:
    terms: list[EngineTerm] = field(default_factory=list)
    cannot: list[str] = field(default_factory=list)
    """One line per reason the policy has no engine form (different engines, topk>1, llama.cpp, …)."""

    def to_dict(self) -> dict[str, Any]:
        return {"terms": [t.to_dict() for t in self.terms], "cannot": list(self.cannot)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Translation":
        return cls([EngineTerm(**t) for t in d.get("terms", [])], list(d.get("cannot", [])))

    def lines(self) -> list[str]:
        """For the terminal: each term's sentence, its config and caveat, then what cannot be expressed."""
        out = []
        for t in self.terms:
            out.append(f"{t.engine}: {t.text}")
            if t.flags:
                out.append(f"  flags: {t.flags}")
            out.append(f"  config: {t.config}")
            if t.caveat:
                out.append(f"  caveat: {t.caveat}")
        out += [f"not in engine terms: {x}" for x in self.cannot]
        return out


# ------------------------------------------------------------------------------------- configurations


@dataclass
class _Config:
    """One configuration as the policy needs it: its engine, whether it speculates, and the one number a
    per-batch setting can change (SGLang's num_steps, vLLM's K); ``same`` is what must match across the
    policy's configurations for one server to play them all."""

    label: str
    engine: str
    speculative: bool | None
    steps: int | None
    same: dict[str, Any]
    info: dict[str, Any]
    why_not: str = ""


def _sglang(label: str, probe: Mapping) -> _Config:
    info = dict(probe.get("server_info") or {})
    algo = info.get("speculative_algorithm")
    if not algo:
        return _Config(label, "sglang", False, 0, {"model": info.get("model_path")}, info)
    topk = info.get("speculative_eagle_topk")
    steps = info.get("speculative_num_steps")
    why = ""
    if str(algo).upper() not in SGLANG_ADAPTIVE_ALGORITHMS:
        why = f"{label} runs {algo}; SGLang's adaptive tiers take only EAGLE/EAGLE3"
    elif topk not in (None, 1):
        why = (f"{label} runs EAGLE topk={topk}; SGLang's adaptive tiers take only topk=1 "
               "(tree drafts keep static settings)")
    elif not isinstance(steps, int) or steps < 1:
        why = f"{label}'s server does not report speculative_num_steps"
    same = {"model": info.get("model_path"), "algorithm": str(algo).upper(),
            "draft": info.get("speculative_draft_model_path"),
            "overlap": not info.get("disable_overlap_schedule", False)}
    return _Config(label, "sglang", True, steps if isinstance(steps, int) else None, same, info, why)


def _vllm(label: str, probe: Mapping) -> _Config:
    info = dict(probe.get("server_info") or {})
    spec = info.get("speculative_config")
    spec = dict(spec) if isinstance(spec, Mapping) else {}
    k = info.get("num_speculative_tokens", spec.get("num_speculative_tokens"))
    speculative = probe.get("speculative")
    if speculative is None and (spec or k is not None):
        speculative = bool(k)
    same = {"model": (probe.get("models") or [None])[0], "method": spec.get("method"), "draft": spec.get("model")}
    return _Config(label, "vllm", speculative, k if isinstance(k, int) else None, same, {**info, "_spec": spec})


def _config(label: str, probe: Mapping | None) -> _Config:
    probe = probe or {}
    engine = str(probe.get("engine") or "unknown")
    if engine == "sglang":
        return _sglang(label, probe)
    if engine == "vllm":
        return _vllm(label, probe)
    return _Config(label, engine, probe.get("speculative"), None, {}, dict(probe.get("server_info") or {}))


# ------------------------------------------------------------------------------------------- the policy


@dataclass
class _Step:
    label: str
    edge: float | None
    """The running batch at this step's lower edge (None for the first step)."""
    ci: tuple[float, float] | None
    tie: list[str]
    """The other labels this step's configurations tie with (the choice there is free)."""
    c: float | None = None
    """The concurrency at the lower edge, and its joint interval where the pair located the switch."""
    c_ci: tuple[float, float] | None = None


def _resolve(steps: Sequence[Mapping], reference: str, speculative: Mapping[str, bool | None]) -> list[_Step] | str:
    """One label per step (a tie takes a neighbour's label, the previous first, else the reference, else its
    first), merged
    where consecutive steps take the same one; a reason string where the batch edges are missing."""
    picks: list[str] = []
    for i, s in enumerate(steps):
        labels = list(s.get("labels") or [])
        if not labels:
            return "a policy step names no configuration"
        if len(labels) == 1:
            picks.append(labels[0])
            continue
        near = [picks[-1]] if picks else []
        if i + 1 < len(steps) and len(steps[i + 1].get("labels") or []) == 1:
            near.append(steps[i + 1]["labels"][0])
        # a tie is no evidence for a switch: it continues a neighbour where it can (the previous first)
        order = [x for x in near if x in labels] + ([reference] if reference in labels else []) + labels
        picks.append(order[0])
    out: list[_Step] = []
    for i, (s, pick) in enumerate(zip(steps, picks)):
        ties = [x for x in (s.get("labels") or []) if x != pick]
        if out and out[-1].label == pick:
            out[-1].tie += [x for x in ties if x not in out[-1].tie]
            continue
        if not out:
            out.append(_Step(pick, None, None, ties))
            continue
        edge = _edge(steps[i - 1], s, speculative)
        if isinstance(edge, str):
            return edge
        ci = None
        raw, sw = steps[i - 1].get("batch_to_ci"), steps[i - 1].get("switch")
        if isinstance(raw, (list, tuple)) and len(raw) == 2 and None not in raw:
            ci = (float(raw[0]), float(raw[1]))
        c = s.get("c_from")
        c_ci = None
        if isinstance(sw, Mapping) and sw.get("confirmed") and None not in (sw.get("ci_low"), sw.get("ci_high")):
            c_ci = (float(sw["ci_low"]), float(sw["ci_high"]))
        out.append(_Step(pick, edge, ci, ties, None if c is None else float(c), c_ci))
    return out


def _running(b: Any) -> tuple[float | None, Mapping]:
    """A bound as a float or as analysis.serverview's BatchAt dict (``running``, ``why``, ``at_cap``, ``cap``)."""
    if isinstance(b, Mapping):
        r = b.get("running")
        return (float(r) if isinstance(r, (int, float)) and math.isfinite(r) else None), b
    if isinstance(b, (int, float)) and math.isfinite(b):
        return float(b), {}
    return None, {}


def _edge(prev: Mapping, nxt: Mapping, speculative: Mapping[str, bool | None]) -> float | str:
    """The running batch at the boundary between two steps: each step's bound is in its own (first)
    configuration's server; the speculative side's is taken, since the setting runs on a speculative server.
    A reason string where it was not measured or where that server ran at its cap (a queue, not a batch size)."""
    sides = [(nxt.get("batch_from"), (nxt.get("labels") or ["?"])[0]),
             (prev.get("batch_to"), (prev.get("labels") or ["?"])[0])]
    sides.sort(key=lambda x: not speculative.get(x[1]))
    c = nxt.get("c_from")
    near = f"near C={float(c):.3g} " if c is not None else ""
    for b, label in sides:
        run, d = _running(b)
        if run is None:
            continue
        if d.get("at_cap"):
            return (f"the switch {near}falls where {label}'s server ran at its cap of {d.get('cap')} requests "
                    "(measured) and the rest queued: not a batch-size threshold")
        return run
    why = next((d.get("why") for b, _ in sides for d in [_running(b)[1]] if d.get("why")), "")
    return (f"the running batch at the switch {near}was not measured ({why or 'no /metrics from the servers there'}),"
            " and the engines' settings are in batch size, not concurrency")


def _threshold(edge: float) -> int:
    """Speculate up to and including the measured batch ``edge`` (a mean, not an integer), switch above it."""
    return max(2, math.floor(edge) + 1)


def _graph_sizes(info: Mapping) -> list[int] | None:
    if info.get("disable_cuda_graph"):
        return None
    for key in ("cuda_graph_bs_decode", "cuda_graph_bs"):
        v = info.get(key)
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            return sorted(v)
    return None


def _sglang_key(t: int, graphs: list[int] | None) -> tuple[int, str]:
    """The tier key whose effective first batch is nearest ``t``. SGLang pads a batch up to the next captured
    CUDA-graph size before choosing its tier, so a key k takes effect from (largest captured size < k) + 1:
    the achievable edges are g + 1 for captured g, and anything above the largest captured size."""
    if not graphs or t > graphs[-1]:
        return t, ""
    edges = sorted({g + 1 for g in graphs if g + 1 <= graphs[-1] + 1})
    k = min(edges, key=lambda e: (abs(e - t), e))
    if k == t:
        return t, ""
    return k, (f"the server captures CUDA graphs at batch sizes {graphs[:12]}{'…' if len(graphs) > 12 else ''} "
               f"and pads a batch up to the next one before choosing the tier, so a tier can start only just above "
               f"a captured size: {k} is the nearest to the measured {t}")


def _where(s: _Step) -> str:
    """" (switch measured at a mean running batch of b, interval …, at C≈c, joint interval …)"."""
    out = f" (switch measured at a mean running batch of {_fmt(s.edge)}"
    if s.ci:
        out += f", joint interval {_fmt(s.ci[0])}–{_fmt(s.ci[1])}"
    if s.c is not None:
        out += f", at C≈{_fmt(s.c)}" + (f", joint interval C={_fmt(s.c_ci[0])}–{_fmt(s.c_ci[1])}" if s.c_ci else "")
    return out + ")"


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


# ------------------------------------------------------------------------------------------- the engines


def _sglang_term(seq: list[_Step], cfgs: dict[str, _Config], reference: str) -> EngineTerm:
    spec = [cfgs[s.label] for s in seq if cfgs[s.label].speculative]
    top = max(spec, key=lambda c: c.steps or 0)
    graphs = _graph_sizes(top.info)
    tiers: dict[str, dict] = {}
    rules, notes, unlisted = [], [], []
    for i, s in enumerate(seq):
        c = cfgs[s.label]
        steps = c.steps if c.speculative else 0
        if i == 0:
            key, why = 1, ""
        else:
            key, why = _sglang_key(_threshold(s.edge), graphs)
            if why:
                notes.append(why)
            elif graphs is None and not top.info.get("disable_cuda_graph") and key > 2:
                unlisted.append(key)
        tiers[str(key)] = {"candidate_steps": [steps]}
        what = f"{steps} steps ({s.label})" if steps else f"speculation off ({s.label})"
        span = f"running batch ≥ {key}{_where(s)}" if i else "from batch 1"
        rules.append(f"{what} {span}")
    if unlisted:
        ks = ", ".join(map(str, unlisted))
        notes.append(f"SGLang pads a batch up to the next captured CUDA-graph size before choosing the tier, so a "
                     f"tier at k starts just above the largest captured size below k; the server did not list its "
                     f"sizes: capture {', '.join(str(k - 1) for k in unlisted)} (--cuda-graph-bs; "
                     f"--cuda-graph-bs-decode on newer builds) for the tiers at {ks} to start exactly there")
    keys = sorted(int(k) for k in tiers)
    if len(set(keys)) < len(seq):
        notes.append("two switches fall on the same integer batch size; the later tier wins there")
    config = json.dumps({str(k): tiers[str(k)] for k in keys}, separators=(", ", ": "))
    n = top.steps or 1
    flags = (f"--speculative-algorithm {top.same['algorithm']} --speculative-eagle-topk 1 "
             f"--speculative-num-steps {n} --speculative-num-draft-tokens {n + 1} "
             "--speculative-adaptive --speculative-adaptive-config adaptive.json")
    cap = top.info.get("max_running_requests")
    last = int(keys[-1])
    if isinstance(cap, int) and last > cap:
        notes.append(f"the last tier starts at batch {last}, above the speculative server's max_running_requests "
                     f"({cap}; SGLang's default under speculation is 48): raise --max-running-requests "
                     "or it is never reached")
    if reference in cfgs and not cfgs[reference].speculative and isinstance(cap, int):
        ref_cap = cfgs[reference].info.get("max_running_requests")
        if isinstance(ref_cap, int) and ref_cap > cap:
            notes.append(f"{reference} ran up to {ref_cap} requests at once, the speculative server caps at {cap}: "
                         "the adaptive server keeps that cap unless --max-running-requests is raised")
    off = [s.label for s in seq if not cfgs[s.label].speculative]
    if off:
        notes.append(f"speculation off on the speculative server is not {off[0]}'s own server: the draft model still "
                     "holds memory (fewer KV pages) and the step-0 tier runs the speculative worker's code path; "
                     "measure the adaptive server itself (loadgen crossover --adaptive LABEL)")
    ties = sorted({x for s in seq for x in s.tie})
    if ties:
        notes.append(f"where {', '.join(ties)} tie(s) with the chosen configuration the tier could be either "
                     "(ties continue the neighbouring configuration, so they add no switch)")
    notes.append("needs an SGLang build whose adaptive config takes batch-size keys and steps 0 (main's "
                 "adaptive_spec_params.py, default tiers 1/8/32/64, off from 64)")
    text = "--speculative-adaptive with " + "; ".join(rules) + "."
    return EngineTerm("sglang", text, config, "; ".join(notes) + ".", flags)


def _vllm_term(seq: list[_Step], cfgs: dict[str, _Config]) -> EngineTerm:
    ks = []
    for s in seq:
        c = cfgs[s.label]
        ks.append(c.steps if c.speculative else 0)
    known = all(k is not None for k in ks)
    k_max = max(k for k in ks if k is not None) if any(k is not None for k in ks) else None
    starts = [1] + [_threshold(s.edge) for s in seq[1:]]
    spec_cfg = next((cfgs[s.label] for s in seq if cfgs[s.label].speculative), None)
    max_seqs = spec_cfg.info.get("max_num_seqs") if spec_cfg else None
    end = max_seqs if isinstance(max_seqs, int) and max_seqs >= starts[-1] else max(VLLM_LAST_RANGE_END, starts[-1])
    rows = [[lo, (starts[i + 1] - 1) if i + 1 < len(starts) else end, ks[i]] for i, lo in enumerate(starts)]
    kk = k_max if known else "<K>"
    sched = ", ".join(f"[{lo}, {hi}, {k if k is not None else '<K>'}]" for lo, hi, k in rows)
    extra = ""
    if spec_cfg is not None:
        for key in ("method", "model"):
            v = spec_cfg.info["_spec"].get(key)
            if v:
                extra += f'"{key}": {json.dumps(v)}, '
    config = "{" + extra + f'"num_speculative_tokens": {kk}, "num_speculative_tokens_per_batch_size": [{sched}]' + "}"
    rules = [f"K={k if k is not None else '<K>'} ({s.label}) for batch {lo}–{hi}" + (_where(s) if i else "")
             for i, ((lo, hi, k), s) in enumerate(zip(rows, seq))]
    notes = []
    if not known:
        notes.append("the server does not report its num_speculative_tokens to loadgen: <K> is the value the "
                     "speculative configuration was launched with")
    if not extra:
        notes.append("merge the key into that configuration's own --speculative-config (method, model)")
    notes.append("vLLM downgrades full CUDA graphs to PIECEWISE when the schedule is set (unless its V2 model "
                 "runner) and drops the schedule under data parallelism, so the K=0 range is not the baseline "
                 "server; measure it (loadgen crossover --adaptive LABEL)")
    notes.append("vLLM's batch is the requests scheduled in a step, prefills included; loadgen's is the mean "
                 "running requests over each window")
    return EngineTerm("vllm", "--speculative-config with " + "; ".join(rules) + ".", config, "; ".join(notes) + ".",
                      f"--speculative-config '{config}'")


def translate(steps: Sequence[Mapping], servers: Mapping[str, Mapping], reference: str) -> Translation:
    """The policy ``steps`` (see the module doc) in the engines' terms, or why not."""
    out = Translation()
    named = list(dict.fromkeys(x for st in steps for x in (st.get("labels") or [])))
    if len({tuple(st.get("labels") or []) for st in steps}) < 2:
        who = " or ".join(named) or "nothing"
        out.cannot.append(f"one configuration ({who}) is best or tied at every measured C: no load-dependent "
                          "setting to write")
        return out
    cfgs = {x: _config(x, servers.get(x)) for x in named}
    engines = {c.engine for c in cfgs.values()}
    if len(engines) > 1:
        out.cannot.append("the policy switches between engines (" + ", ".join(f"{c.label}: {c.engine}"
                          for c in cfgs.values()) + "); one server cannot play them: route by load instead")
        return out
    engine = engines.pop()
    if engine not in ("sglang", "vllm"):
        out.cannot.append(f"{engine} has no load-dependent speculation setting (llama.cpp fixes its draft sizes at "
                          "launch): keep the servers and route by load" if engine == "llama.cpp" else
                          f"the servers' engine is {engine}: loadgen knows no per-batch speculation setting for it")
        return out
    seq = _resolve(steps, reference, {x: c.speculative for x, c in cfgs.items()})
    if isinstance(seq, str):
        out.cannot.append(seq)
        return out
    if len(seq) < 2:
        out.cannot.append(f"{seq[0].label} is chosen at every measured C (its ties resolved): no load-dependent "
                          "setting to write")
        return out
    cfgs = {s.label: cfgs[s.label] for s in seq}
    bad = [c.why_not for c in cfgs.values() if c.why_not]
    if bad:
        out.cannot += bad
        return out
    spec = [c for c in cfgs.values() if c.speculative]
    if not spec:
        out.cannot.append("no configuration of the policy speculates")
        return out
    for key in ("model", "algorithm", "method", "draft", "overlap"):
        vals = {repr(c.same.get(key)) for c in spec if key in c.same}
        if len(vals) > 1:
            out.cannot.append(f"the speculative configurations differ in {key} ("
                              + ", ".join(f"{c.label}: {c.same.get(key)}" for c in spec) + "); a per-batch "
                              "setting changes only the number of draft steps/tokens on one server")
            return out
    models = {c.same.get("model") for c in cfgs.values() if c.same.get("model")}
    if len(models) > 1:
        out.cannot.append("the configurations serve different models (" + ", ".join(sorted(map(str, models))) + ")")
        return out
    out.terms.append(_sglang_term(seq, cfgs, reference) if engine == "sglang" else _vllm_term(seq, cfgs))
    return out


def engine_terms(steps: Sequence[Mapping], servers: Mapping[str, Mapping], reference: str) -> list[EngineTerm]:
    """Only the terms (see :func:`translate` for the reasons a policy has none)."""
    return translate(steps, servers, reference).terms
