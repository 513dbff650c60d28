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

What each engine reads, and how its setting is spelled, is its module's (``loadgen.engines``: SGLang's
``--speculative-adaptive-config`` tiers, vLLM's ``num_speculative_tokens_per_batch_size``; an engine without
``terms`` says why it has none). Here is the policy's side: which configuration each step takes (ties
resolved), the running batch at each switch and the threshold it becomes, and whether one server can play
the configurations at all.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from loadgen.engines import get
from loadgen.engines.base import SpecSetup, Tier


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


def _config(label: str, probe: Mapping | None) -> SpecSetup:
    """A configuration as its engine reads it; an engine without a per-batch setting: what the probe said."""
    probe = probe or {}
    engine = str(probe.get("engine") or "unknown")
    terms = get(engine).terms
    if terms is not None:
        return terms.setup(label, probe)
    return SpecSetup(label, engine, probe.get("speculative"), None, {}, dict(probe.get("server_info") or {}))


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


def _tiers(seq: list[_Step]) -> list[Tier]:
    """The resolved steps as the engines take them: from batch 1, then from each switch's threshold."""
    return [Tier(s.label, _threshold(s.edge) if i else 1, _where(s) if i else "", tuple(s.tie))
            for i, s in enumerate(seq)]


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
    terms = get(engine).terms
    if terms is None:
        out.cannot.append(get(engine).no_terms.format(engine=engine))
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
    setting = terms.write(_tiers(seq), cfgs, reference)
    out.terms.append(EngineTerm(engine, setting.text, setting.config, setting.caveat, setting.flags))
    return out


def engine_terms(steps: Sequence[Mapping], servers: Mapping[str, Mapping], reference: str) -> list[EngineTerm]:
    """Only the terms (see :func:`translate` for the reasons a policy has none)."""
    return translate(steps, servers, reference).terms
