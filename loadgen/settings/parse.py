"""Parsing of the option values several commands share: durations, ladders, SLOs, headers, labelled values."""

from __future__ import annotations

import re

from loadgen import redact
from loadgen.errors import LoadgenError
from loadgen.metrics import SLO_METRICS
from loadgen.stage.result import Slo

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str, what: str = "--duration") -> float:
    """'30s', '2m', '500ms', '1.5' (seconds) → seconds."""
    m = _DUR.match(str(text))
    if not m:
        raise LoadgenError(f"{what}: {text!r} is not a duration (e.g. 30s, 2m, 500ms)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _whole(text: str, what: str, lo: int, unit: str = "") -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise LoadgenError(f"{what}: {text!r} is not a whole number{unit and ' of ' + unit}") from None
    if v < lo:
        raise LoadgenError(f"{what}: must be >= {lo}{unit and ' ' + unit}, got {v}")
    return v


def count(text: str, what: str) -> int:
    """'5' → 5: a whole number >= 1 (a stage's requests, the passes, the processes)."""
    return _whole(text, what, 1)


def share(text: str, what: str, high: float = 0.5) -> float:
    """'2%', '2 %' or '0.02' → 0.02: a share in (0, ``high``]."""
    t = str(text).strip()
    try:
        v = float(t[:-1].strip()) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise LoadgenError(f"{what}: {text!r} is not a share (e.g. 2% or 0.02)") from None
    if not 0.0 < v <= high:
        raise LoadgenError(f"{what}: must lie in (0, {high * 100:g} %], got {text!r}")
    return v


def level(text: str, what: str) -> float:
    """'0.9' → 0.9: a confidence level in [0.5, 1) (as ``loadgen report --confidence`` takes it)."""
    try:
        v = float(str(text).strip())
    except ValueError:
        raise LoadgenError(f"{what}: {text!r} is not a number (e.g. 0.9)") from None
    if not 0.5 <= v < 1.0:
        raise LoadgenError(f"{what}: must lie in [0.5, 1) (e.g. 0.9 for 90 %), got {text!r}")
    return v


def tokens(text: str, what: str) -> int:
    """'512' → 512: a whole number of tokens, 0 allowed (none)."""
    return _whole(text, what, 0, "tokens")


def ladder(text: str, what: str = "--ladder") -> list[int]:
    """'1,2,5,10' → [1, 2, 5, 10]: positive and strictly increasing."""
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise LoadgenError(f"{what}: {text!r} is not a comma-separated list of whole numbers") from None
    if not values:
        raise LoadgenError(f"{what}: the list of concurrencies is empty")
    for v in values:
        if v < 1:
            raise LoadgenError(f"{what}: concurrencies must be >= 1, got {v}")
    for a, b in zip(values, values[1:]):
        if b <= a:
            raise LoadgenError(f"{what}: concurrencies must increase, got {b} after {a}")
    return values


def rates(text: str, what: str = "--rate") -> list[float]:
    """'1,2,5.5,10' → [1.0, 2.0, 5.5, 10.0] requests/s: each > 0, strictly increasing."""
    import math

    try:
        values = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise LoadgenError(f"{what}: {text!r} is not a comma-separated list of rates (requests/s)") from None
    if not values:
        raise LoadgenError(f"{what}: the list of rates is empty")
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise LoadgenError(f"{what}: rates must be > 0 requests/s, got {text!r}")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise LoadgenError(f"{what}: rates must increase, got {text!r}")
    return values


def arrival(text: str, what: str = "--arrival") -> str:
    """'poisson' | 'constant' | 'gamma:CV', checked (loadgen.timing.arrivals); the text as given."""
    from loadgen.timing.arrivals import parse_arrival

    parse_arrival(text, what)
    return str(text).strip().lower()


def slo(text: str | None) -> Slo:
    """'ttft_ms=500,tpot_ms=50' → Slo."""
    out = Slo()
    if not text:
        return out
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not hasattr(out, key):
            keys = ", ".join(f"{m.slo_key}=" for m in SLO_METRICS)
            raise LoadgenError(f"--slo: {part!r} is not one of {keys}")
        try:
            setattr(out, key, float(value))
        except ValueError:
            raise LoadgenError(f"--slo: {key} needs a number of milliseconds, got {value!r}") from None
    return out


def headers(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise LoadgenError(f"--header: {item!r} is not 'Name: value'")
        out[key.strip()] = value.strip()
    redact.remember_headers(out)  # sent, never written (loadgen/redact.py)
    return out


LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
"""A configuration's label: it names files (``LABEL.server.log``), CSV rows and report colours."""


def label(text: str, what: str) -> str:
    text = str(text).strip()
    if not LABEL.match(text):
        raise LoadgenError(f"{what}: {text!r} is not a label (letters, digits, '_', '.', '+', '-'; "
                           "starting with a letter or digit)")
    return text


def labelled(items: list[str] | None, what: str, value: str) -> list[tuple[str, str]]:
    """['base=http://a', 'eagle=http://b'] → [(label, value)] in the order given; a label given twice,
    or an item without '=', is a one-line error naming ``what`` (``--target``)."""
    out: list[tuple[str, str]] = []
    for item in items or []:
        name, sep, v = str(item).partition("=")
        if not sep or not v.strip():
            raise LoadgenError(f"{what}: expected LABEL={value}, got {item!r}")
        name = label(name, what)
        if any(name == n for n, _ in out):
            raise LoadgenError(f"{what}: label {name!r} is given twice (each configuration needs its own label)")
        out.append((name, v.strip()))
    return out


def names(text: str | None, what: str) -> list[str]:
    """'baseline,spec,spec-topk4' → a list of distinct labels."""
    out = [label(x, what) for x in str(text or "").split(",") if x.strip()]
    if not out:
        raise LoadgenError(f"{what}: the list is empty")
    seen = {x for x in out if out.count(x) > 1}
    if seen:
        raise LoadgenError(f"{what}: {sorted(seen)[0]!r} is named twice")
    return out
