"""Per-bin figures over a stage's steady window: the samples crossover detection resamples.

A stage's steady window is cut into equal bins (a twentieth of the window by
default). Per bin we keep counters (tokens arrived, requests completed and
meeting SLOs, per-user decode rate sums) and small HDR histograms of TTFT and
ITL (2 significant digits: enough for a per-bin percentile, cheap to keep), so a
per-window p50/p99 exists and results from several processes still merge
exactly. Request-level figures are binned by the request's start, chunk-level
ones by the chunk's arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.histograms import Hist
from loadgen.metrics import REGISTRY

COUNTERS = ("tokens", "completed", "good", "decode_rate_sum", "decode_rate_n", "e2e_planned_sum")
"""``e2e_planned_sum``: an open loop's E2E from plan (ms) summed over the bin's completed requests: with
``completed``, its per-window mean (loadgen.analysis.rates), which pairs across targets better than a p50."""
# Per-second histograms only for the metrics whose per-window percentiles are crossover samples
# (ttft, itl today): the others are read from the stage histogram alone, and binning costs memory.
BIN_HISTS = tuple(m.name for m in REGISTRY if m.crossover_percentiles or m.binned)


def _bin_hist() -> Hist:
    return Hist(1.0, "us", digits=2)


@dataclass
class Timeline:
    series: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in COUNTERS})
    hists: dict[str, list[Hist]] = field(default_factory=lambda: {k: [] for k in BIN_HISTS})

    def bump(self, name: str, index: int, amount: float = 1) -> None:
        s = self.series[name]
        if index >= len(s):
            s.extend([0] * (index + 1 - len(s)))
        s[index] += amount

    def hist(self, name: str, index: int) -> Hist:
        hs = self.hists[name]
        while index >= len(hs):
            hs.append(_bin_hist())
        return hs[index]

    def merge(self, other: "Timeline") -> None:
        for k, s in other.series.items():
            for i, v in enumerate(s):
                if v:
                    self.bump(k, i, v)
        for k, hs in other.hists.items():
            for i, h in enumerate(hs):
                if h.count:
                    self.hist(k, i).add(h)

    def to_dict(self, bins: int, bin_s: float) -> dict:
        out: dict = {"bin_s": round(bin_s, 6)}
        for k, s in self.series.items():
            vals = (s + [0] * bins)[:bins]
            out[k] = [round(v, 6) if isinstance(v, float) else v for v in vals]
        for k, hs in self.hists.items():
            out[f"{k}_hdr"] = [(hs[i].encode() if i < len(hs) and hs[i].count else "") for i in range(bins)]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Timeline":
        tl = cls()
        for k in COUNTERS:
            tl.series[k] = list(d.get(k, []))
        for k in BIN_HISTS:
            tl.hists[k] = [Hist.decode(text, digits=2) for text in d.get(f"{k}_hdr", [])]
        return tl

    # --- per-bin samples ------------------------------------------------------------------
    @staticmethod
    def rate(d: dict, name: str) -> list[float]:
        """A counter per second, one value per bin."""
        b = d["bin_s"]
        return [v / b for v in d.get(name, [])]

    @staticmethod
    def ratio(d: dict, num: str, den: str) -> list[float]:
        return [n / m for n, m in zip(d.get(num, []), d.get(den, [])) if m]

    @staticmethod
    def percentile(d: dict, name: str, p: float, min_count: int = 1) -> list[float]:
        """Per-bin percentile in ms of a binned histogram, bins with fewer than ``min_count`` samples skipped."""
        out = []
        for text in d.get(f"{name}_hdr", []):
            if text:
                h = Hist.decode(text, digits=2)
                if h.count >= min_count:
                    out.append(h.percentile(p) / 1000)
        return out
