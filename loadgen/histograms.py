"""HDR histograms with a unit: record, merge, encode, percentiles.

Latencies are kept in microseconds with 3 significant digits (0.1 % relative
error at any magnitude), from 1 µs to one hour. Counts such as tokens per chunk
are kept as they are; fractional values (accept length) are scaled by 1000.
"""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


class Hist:
    """One HDR histogram plus what its integers mean."""

    __slots__ = ("h", "scale", "unit")

    def __init__(self, scale: float = 1.0, unit: str = "us", highest: int = 3_600_000_000) -> None:
        self.h = HdrHistogram(1, highest, 3)
        self.scale = scale
        """Recorded integer = value × scale (1 for µs and counts, 1000 for fractional values)."""
        self.unit = unit

    def record(self, value: int, count: int = 1) -> None:
        # HDR cannot hold 0; a 0 µs gap (two chunks in one read) is recorded as 1 µs.
        self.h.record_value(value if value > 0 else 1, count)

    def record_float(self, value: float, count: int = 1) -> None:
        self.record(round(value * self.scale), count)

    @property
    def count(self) -> int:
        return self.h.get_total_count()

    def add(self, other: "Hist") -> None:
        self.h.add(other.h)

    def percentile(self, p: float) -> float:
        return self.h.get_value_at_percentile(p) / self.scale

    def mean(self) -> float:
        return self.h.get_mean_value() / self.scale

    def summary(self, divisor: float = 1.0) -> dict:
        """count, mean, min, max and percentiles, each divided by ``divisor`` (e.g. 1000 for µs → ms)."""
        n = self.count
        if n == 0:
            return {"count": 0}
        d = self.scale * divisor
        out = {
            "count": n,
            "mean": round(self.h.get_mean_value() / d, 4),
            "min": round(self.h.get_min_value() / d, 4),
            "max": round(self.h.get_max_value() / d, 4),
        }
        for p in PERCENTILES:
            out[_pkey(p)] = round(self.h.get_value_at_percentile(p) / d, 4)
        return out

    def encode(self) -> str:
        """HdrHistogram's compressed V2 encoding, base64: compact and readable by other HDR tools."""
        data = self.h.encode()
        return data.decode("ascii") if isinstance(data, bytes) else data

    @classmethod
    def decode(cls, text: str, scale: float = 1.0, unit: str = "us") -> "Hist":
        hist = cls(scale, unit)
        if text:
            hist.h.add(HdrHistogram.decode(text.encode("ascii")))
        return hist


def _pkey(p: float) -> str:
    return "p" + (str(int(p)) if p == int(p) else str(p).replace(".", "_"))
