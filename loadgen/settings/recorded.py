"""The typed settings a run was asked with, as run.json keeps them, and the first way a new invocation differs.

In: a :class:`Settings` (after every default and ``--config`` value is filled). Out: a plain dict
(``run.settings`` in run.json) and, against a recorded one, one line naming the first knob that
differs (``--resume`` refuses a run asked differently: its kept stages would not be the new run's).
Compared typed, so the order of the flags on the command line does not matter.
"""

from __future__ import annotations

import dataclasses

from loadgen import redact
from loadgen.settings.knobs import Settings, knobs

NOT_COMPARED = frozenset({"resume", "out", "no_report", "verbose", "from_", "wait_for_server"})
"""Where the results go, whether a page is drawn, how long to wait for a server to answer: they change no stage."""


def _plain(v):
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {k: _plain(x) for k, x in dataclasses.asdict(v).items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


def record(s: Settings, front: str) -> dict:
    """``front``'s settings as plain JSON values, by field name (the ones that change a stage)."""
    return {name: _plain(getattr(s, name)) for name, _ in knobs(front) if name not in NOT_COMPARED}


def _words(v) -> str:
    if v is None:
        return "not given"
    if isinstance(v, list):
        return ",".join(_words(x) for x in v) if v else "none"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_words(x)}" for k, x in v.items()) or "none"
    return str(v)


def difference(old: dict, s: Settings, front: str) -> str | None:
    """The first knob (in field order) whose value differs from the recorded ``old``, in words; None: the same.

    run.json holds its settings with their secrets masked (loadgen/redact.py): the new ones are compared
    masked the same way (a header's value, a URL's password are not checked)."""
    new = redact.document(record(s, front))
    flag = {name: k.flag for name, k in knobs(front)}
    for name, value in new.items():
        if name not in old:  # a knob newer than the run: it had none to record
            continue
        was = old[name]
        if _same(was, value):
            continue
        return f"{flag.get(name) or name}: the run had {_words(was)}, this invocation {_words(value)}"
    return None


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b
