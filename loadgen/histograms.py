"""HDR histograms with a unit: record, merge, encode, percentiles.

Latencies are kept in microseconds with 3 significant digits (0.1 % relative
error at any magnitude), from 1 µs to one hour. Counts such as tokens per chunk
are kept as they are; fractional values (accept length) are scaled by 1000.
"""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
SMALL = 32
"""Up to this many values ``record_many`` records in plain Python (a request's per-metric arrays are
mostly this small); numpy's arrays pay off above it."""


class Hist:
    """One HDR histogram plus what its integers mean."""

    __slots__ = ("h", "scale", "unit")

    def __init__(self, scale: float = 1.0, unit: str = "us", highest: int = 3_600_000_000, digits: int = 3) -> None:
        self.h = HdrHistogram(1, highest, digits)
        self.scale = scale
        """Recorded integer = value × scale (1 for µs and counts, 1000 for fractional values)."""
        self.unit = unit

    def record(self, value: int, count: int = 1) -> None:
        # HDR cannot hold 0; a 0 µs gap (two chunks in one read) is recorded as 1 µs.
        self.h.record_value(value if value > 0 else 1, count)

    def record_float(self, value: float, count: int = 1) -> None:
        self.record(round(value * self.scale), count)

    def record_many(self, values, counts=None) -> None:
        """Record many values (in the unit, scaled like ``record_float``), each ``counts[i]`` times.

        The same bucket arithmetic as hdrh's ``record_value``, done on arrays:
        hdrh spends 1-4 µs a value in Python calls, which at a few thousand
        chunks a second holds the event loop for tens of milliseconds when many
        streams end together, and chunks read after such a stall are timed
        late. Values above the highest trackable one are kept at it rather than
        dropped, so a count never goes missing.
        """
        n = len(values)
        if n == 0:
            return
        if n <= SMALL:
            self._record_few(values, counts)
            return
        h = self.h
        v = np.rint(np.asarray(values, dtype=np.float64) * self.scale).astype(np.int64)
        np.clip(v, 1, h.highest_trackable_value, out=v)  # HDR cannot hold 0 (two chunks in one read): 1 µs
        bits = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1]  # bit_length, exact below 2**53
        b = bits - (h.unit_magnitude + h.sub_bucket_half_count_magnitude + 1)
        idx = ((b + 1) << h.sub_bucket_half_count_magnitude) + (v >> (b + h.unit_magnitude)) - h.sub_bucket_half_count
        c = np.ones(n, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        np.add.at(_counts_view(h), idx, c)
        h.total_count += int(c.sum())
        h.min_value = min(h.min_value, int(v.min()))
        h.max_value = max(h.max_value, int(v.max()))

    def _record_few(self, values, counts) -> None:
        """``record_many`` for a few values, in plain Python: the same rounding (half to even, as np.rint),
        clip and bucket index; numpy's per-call cost made each of a request's ~14 small calls ~50 µs."""
        h = self.h
        scale, top, mask = self.scale, h.highest_trackable_value, h.sub_bucket_mask
        shift = h.unit_magnitude + h.sub_bucket_half_count_magnitude + 1
        half_mag, half, unit = h.sub_bucket_half_count_magnitude, h.sub_bucket_half_count, h.unit_magnitude
        vals = values.tolist() if hasattr(values, "tolist") else list(values)
        cs = [1] * len(vals) if counts is None else (counts.tolist() if hasattr(counts, "tolist") else list(counts))
        buckets = h.counts
        lo, hi = h.min_value, h.max_value
        for x, c in zip(vals, cs):
            x = float(x) * scale
            # numpy turns a NaN or an infinity into int64's minimum, which the clip makes 1
            v = round(x) if x - x == 0 else 1
            v = 1 if v < 1 else (top if v > top else v)
            b = (v | mask).bit_length() - shift
            buckets[((b + 1) << half_mag) + (v >> (b + unit)) - half] += c
            h.total_count += c
            lo = v if v < lo else lo
            hi = v if v > hi else hi
        h.min_value, h.max_value = lo, hi

    @property
    def count(self) -> int:
        return self.h.get_total_count()

    def add(self, other: "Hist") -> None:
        a, b = self.h, other.h
        if b.total_count == 0:
            return
        if (a.counts_len, a.unit_magnitude, a.sub_bucket_half_count_magnitude) != (
                b.counts_len, b.unit_magnitude, b.sub_bucket_half_count_magnitude):
            a.add(b)  # different layouts: hdrh re-records value by value
            return
        # Same layout: counters add index by index (hdrh's own add walks them in Python).
        view = _counts_view(a)
        view += _counts_view(b)
        a.total_count += b.total_count
        a.min_value = min(a.min_value, b.min_value)
        a.max_value = max(a.max_value, b.max_value)

    def percentile(self, p: float) -> float:
        return self._scan((p,))[1][0] / self.scale

    def mean(self) -> float:
        return self._scan(())[0]["mean"] / self.scale

    def _scan(self, percentiles) -> tuple[dict, list[int]]:
        """count, mean, min, max and the given percentiles in one pass over the buckets.

        hdrh's own getters each walk every bucket through Python iterators (ms
        per call, seconds per stage summary); this reads the counts once, with
        HdrHistogram's conventions: mean over median-equivalent values,
        percentiles as the highest equivalent value of the bucket reaching the
        target count.
        """
        h = self.h
        total = h.get_total_count()
        # the non-zero buckets found by numpy: listing the whole counter array (23,552 buckets from 1 µs to an
        # hour) in Python took 2.5 ms a histogram, 30 of them a stage: ~0.1 s of each stage's to_dict, between
        # two windows, and ~4 s of the README crossover's analysis
        counts = _counts_view(h)
        where = np.flatnonzero(counts)
        nz = list(zip(where.tolist(), counts[where].tolist()))
        stats = {"count": total, "mean": 0.0, "min": 0, "max": 0}
        if not nz:
            return stats, [0 for _ in percentiles]
        s = 0
        for i, c in nz:
            s += h.get_lowest_equivalent_value(v := h.get_value_from_index(i)) * c
            s += (h.get_highest_equivalent_value(v) - h.get_lowest_equivalent_value(v)) * c / 2
        stats["mean"] = s / total
        stats["min"] = h.get_lowest_equivalent_value(h.get_value_from_index(nz[0][0]))
        stats["max"] = h.get_highest_equivalent_value(h.get_value_from_index(nz[-1][0]))
        targets = [max(1, int(min(p, 100.0) * total / 100 + 0.5)) for p in percentiles]
        out = [0] * len(targets)
        order = sorted(range(len(targets)), key=lambda k: targets[k])
        run, j = 0, 0
        for i, c in nz:
            run += c
            while j < len(order) and run >= targets[order[j]]:
                out[order[j]] = h.get_highest_equivalent_value(h.get_value_from_index(i))
                j += 1
            if j == len(order):
                break
        return stats, out

    def summary(self, divisor: float = 1.0) -> dict:
        """count, mean, min, max and percentiles, each divided by ``divisor`` (e.g. 1000 for µs → ms)."""
        stats, values = self._scan(PERCENTILES)
        if stats["count"] == 0:
            return {"count": 0}
        d = self.scale * divisor
        out = {
            "count": stats["count"],
            "mean": round(stats["mean"] / d, 4),
            "min": round(stats["min"] / d, 4),
            "max": round(stats["max"] / d, 4),
        }
        for p, v in zip(PERCENTILES, values):
            out[_pkey(p)] = round(v / d, 4)
        return out

    def encode(self) -> str:
        """HdrHistogram's compressed V2 encoding, base64: compact and readable by other HDR tools."""
        data = self.h.encode()
        return data.decode("ascii") if isinstance(data, bytes) else data

    @classmethod
    def decode(cls, text: str, scale: float = 1.0, unit: str = "us", digits: int = 3) -> "Hist":
        hist = cls(scale, unit, digits=digits)
        if text:
            hist.h.add(HdrHistogram.decode(text.encode("ascii")))
        return hist


def _counts_view(h: HdrHistogram) -> np.ndarray:
    """hdrh's counters (a ctypes array inside its encoder) as a numpy array, without a copy."""
    return np.ctypeslib.as_array(h.counts)


def _pkey(p: float) -> str:
    return "p" + (str(int(p)) if p == int(p) else str(p).replace(".", "_"))
