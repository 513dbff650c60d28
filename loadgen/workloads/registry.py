"""The registry: a workload spec becomes a workload.

In: a spec — a built-in name (``code``, ``chat``, ``predictable``, ``freetext``, content in
``builtin/``); an entry-point name from the ``loadgen.workloads`` group (a Workload subclass,
instance or factory); a ``.jsonl`` path (``prompt`` or ``messages`` per line), a ``.json`` path
or ``sharegpt:PATH`` (ShareGPT conversations); a weighted mix ``code:2,chat:1`` (each
request keeps the label of the workload it came from); or phases on a clock
``phases:predictable@30s,freetext@30s`` (loadgen/workloads/phases.py). Out: a :class:`Workload`, with
:class:`Lengths` applied to each component.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from loadgen.errors import LoadgenError
from loadgen.request import GenRequest
from loadgen.workloads.base import Workload, derive, one_line
from loadgen.workloads.lengths import Lengths, Shaped
from loadgen.workloads.phases import PREFIX as PHASES, PhaseWorkload
from loadgen.workloads.phases import parse as parse_phases

ENTRY_POINT_GROUP = "loadgen.workloads"

# Built-in name -> "module:Class". Modules are imported only when the workload is used, so
# `loadgen workloads list` and the other commands do not pay for loading every data file.
BUILTINS: dict[str, str] = {
    "code": "loadgen.workloads.builtin.code:CodeWorkload",
    "chat": "loadgen.workloads.builtin.chat:ChatWorkload",
    "predictable": "loadgen.workloads.builtin.predictable:PredictableWorkload",
    "freetext": "loadgen.workloads.builtin.freetext:FreetextWorkload",
}


class Mix(Workload):
    """Workloads drawn by weight; every request keeps the label of the workload it came from."""

    def __init__(self, parts: Sequence[tuple[Workload, float]]) -> None:
        self.parts = list(parts)
        self.name = ",".join(f"{w.name}:{weight:g}" for w, weight in self.parts)
        self.description = "weighted mix of " + ", ".join(w.name for w, _ in self.parts)

    def requests(self, seed: int) -> Iterator[GenRequest]:
        rng = derive(seed, "mix")
        streams = [w.requests(derive(seed, "mix", i, w.name).getrandbits(63)) for i, (w, _) in enumerate(self.parts)]
        cum, total = [], 0.0
        for _, weight in self.parts:
            total += weight
            cum.append(total)
        indices = range(len(streams))
        while True:
            (i,) = rng.choices(indices, cum_weights=cum)
            yield next(streams[i])



def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def available() -> list[str]:
    """Built-in names, then entry-point names; file paths and mixes are accepted too."""
    return list(BUILTINS) + sorted(set(_entry_points()) - set(BUILTINS))


def _unknown(name: str) -> LoadgenError:
    return LoadgenError(
        f"unknown workload {name!r}; known: {', '.join(available())} "
        "(or a .jsonl/.json path, sharegpt:PATH, a mix such as code:2,chat:1, or phases:chat@30s,code@30s)"
    )


def _load_builtin(name: str) -> Workload:
    module, _, attr = BUILTINS[name].partition(":")
    return getattr(importlib.import_module(module), attr)()


def _load_entry_point(ep: importlib.metadata.EntryPoint) -> Workload:
    where = f"workload entry point {ep.name!r} ({ep.value})"
    try:
        obj = ep.load()
    except Exception as exc:
        raise LoadgenError(f"{where} failed to import: {one_line(exc)}") from exc
    if not (isinstance(obj, Workload) or callable(obj)):
        raise LoadgenError(f"{where} is a {type(obj).__name__}, not a Workload subclass, instance or factory")
    try:
        workload = obj if isinstance(obj, Workload) else obj()
    except Exception as exc:
        raise LoadgenError(f"{where} failed to construct: {one_line(exc)}") from exc
    if not isinstance(workload, Workload):
        raise LoadgenError(f"{where} gave a {type(workload).__name__}, not a loadgen.workloads.base.Workload")
    if not workload.name:
        workload.name = ep.name
    return workload


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".jsonl", ".json")) or "/" in spec or "\\" in spec


def _load(spec: str) -> Workload:
    from loadgen.workloads import files as datasets  # file loaders are only needed for file specs

    if spec.startswith("sharegpt:"):
        return datasets.sharegpt_workload(Path(spec.removeprefix("sharegpt:")))
    if spec in BUILTINS:
        return _load_builtin(spec)
    if _looks_like_path(spec):
        path = Path(spec)
        if path.suffix == ".json":
            return datasets.sharegpt_workload(path)
        if path.suffix != ".jsonl":
            raise LoadgenError(f"{spec}: workload files are .jsonl (prompt/messages per line) or ShareGPT .json")
        return datasets.jsonl_workload(path)
    ep = _entry_points().get(spec)
    if ep is None:
        raise _unknown(spec)
    return _load_entry_point(ep)


def _weight(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def split_mix(spec: str) -> list[tuple[str, float]] | None:
    """``[(spec, weight), ...]`` for a weighted spec, None for a single unweighted one (a ``phases:`` spec is one)."""
    if spec.strip().startswith(PHASES):
        return None
    items = [item.strip() for item in spec.split(",")]
    weighted = []
    for item in items:
        name, sep, tail = item.rpartition(":")
        weight = _weight(tail) if sep else None
        weighted.append((name.strip(), weight) if weight is not None else (item, None))
    if len(items) == 1 and weighted[0][1] is None:
        return None
    out = []
    for name, weight in weighted:
        if not name:
            raise LoadgenError(f"workload mix {spec!r}: empty entry")
        out.append((name, 1.0 if weight is None else weight))
    return out


def resolve(spec: str, lengths: Lengths | None = None) -> Workload:
    """The workload a spec names, with ``lengths`` applied to each component."""
    spec = spec.strip()
    if not spec:
        raise _unknown(spec)

    def one(name: str) -> Workload:
        workload = _load(name)
        return Shaped(workload, lengths) if lengths is not None and lengths.active else workload

    if spec.startswith(PHASES):
        schedule = parse_phases(spec)
        try:
            return PhaseWorkload(schedule, {name: resolve(name, lengths) for name in schedule.names})
        except LoadgenError as exc:
            raise LoadgenError(f"workload {spec!r}: {exc}") from None
    mix = split_mix(spec)
    if mix is None:
        return one(spec)
    weights = [w for _, w in mix]
    if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
        raise LoadgenError(f"workload mix {spec!r}: weights must be non-negative numbers summing to more than 0")
    names = [name for name, _ in mix]
    for name in names:
        if names.count(name) > 1:
            raise LoadgenError(f"workload mix {spec!r}: {name!r} appears more than once")
    loaded = [(one(name), w) for name, w in mix]  # zero-weight entries are still checked
    parts = [(workload, w) for workload, w in loaded if w > 0]
    return parts[0][0] if len(parts) == 1 else Mix(parts)
