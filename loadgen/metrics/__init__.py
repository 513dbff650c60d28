"""The metric registry: one module per metric, each saying what one sample is and where it goes.

In: finished ``RequestRecord``s. Out: per metric, its samples (histograms are filled from them),
and the declarations every later folder reads instead of keeping its own list of names:

- ``slo_key`` / ``slo_value``: the ``--slo`` key that limits the metric per request and the
  request's value checked against it (``loadgen.stage.result.Slo`` is built from these);
- ``csv_stats``: the summary figures that are ``run.csv`` columns (``loadgen.run.results``);
- ``crossover_percentiles``: the per-window percentiles that become crossover metrics
  (``loadgen.analysis.compare``), beside the stage rates of ``RATES``.

Definitions are in docs/metrics.md and nowhere else: adding a metric is one module here,
one entry in ``REGISTRY`` (or ``RATES``) and its line there. A histogram metric is either
request-level (one sample per request that started inside the stage's steady window and
completed) or chunk-level (samples from every chunk that arrived inside the steady window,
whichever request it belongs to).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.histograms import Hist
from loadgen.record import RequestRecord

_I64 = np.int64


class Metric:
    name: str = ""
    unit: str = "ms"
    scale: float = 1.0
    """Hist scale: recorded integer = value × scale."""
    divisor: float = 1000.0
    """Summary divisor: µs → ms for latencies."""
    level: str = "request"
    """"request" or "chunk"."""
    description: str = ""
    label: str = ""
    """How tables name it ("TTFT"); crossover metrics are called f"{label} p{percentile}"."""
    slo_key: str = ""
    """The per-request SLO key (``--slo ttft_ms=500``, ``[slo]``) limiting this metric, "" for none."""
    csv_stats: tuple[str, ...] = ()
    """Summary figures written as run.csv columns, named f"{name}_{stat}" (+ "_ms" for a latency)."""
    crossover_percentiles: tuple[tuple[int, int], ...] = ()
    """(percentile, fewest samples a window needs for it) of each crossover metric it gives:
    a window's p99 needs enough samples to mean anything, its p50 a few. Binned per window
    only where ``loadgen.stage.timeline.BIN_HISTS`` keeps it."""

    binned: bool = False
    """Also kept per timeline bin without being a crossover metric (an open loop's SLO percentiles are
    bootstrapped over the window's bins: loadgen.analysis.rates)."""

    only_with: str = ""
    """A metric whose samples a slice must have for this one to be summarised (run.json, run.csv): time to first
    output is every request's, but without reasoning in the slice it is TTFT again, not a figure of its own."""

    def slo_value(self, rec: RequestRecord) -> float | None:
        """The request's value (ms) checked against ``slo_key``; None: nothing to check for this request."""
        return None

    def csv_columns(self) -> list[tuple[str, str]]:
        """(column name, summary key) of each run.csv column of this metric, in order."""
        unit = "_ms" if self.unit == "ms" else ""
        return [(f"{self.name}_{stat}{unit}", stat) for stat in self.csv_stats]

    worse_with_spec: dict[int, str] = {}
    """Percentile → why it can be worse with speculation (CrossoverSample.worse_with_spec)."""

    def crossover_samples(self) -> tuple["CrossoverSample", ...]:
        return tuple(CrossoverSample(f"{self.name}_p{p}", f"{self.label} p{p}", self.unit, False, "percentile",
                                     (self.name,), float(p), n, self.worse_with_spec.get(p, ""))
                     for p, n in self.crossover_percentiles)

    def new_hist(self) -> Hist:
        return Hist(self.scale, self.unit)

    def samples(self, rec: RequestRecord, lo_ns: int, hi_ns: int):
        """Yield (time_ns, value, count): value in the histogram's unit before scaling.

        time_ns places the sample in a timeline bin: the chunk's arrival for
        chunk-level metrics, the request's start for request-level ones.
        Chunk-level metrics yield only chunks that arrived in [lo_ns, hi_ns).
        A metric defines this or ``arrays``; each is derived from the other.
        """
        for t, v, c in zip(*self.arrays(rec, lo_ns, hi_ns)):
            yield int(t), float(v), int(c)

    def arrays(self, rec: RequestRecord, lo_ns: int, hi_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The same samples as three arrays (times, values, counts).

        Chunk-level metrics define this one: a stage folds thousands of chunks
        a second on the event loop that also times them, and per-chunk Python
        loops there would hold it long enough to time later chunks late.
        """
        rows = list(self.samples(rec, lo_ns, hi_ns))
        if not rows:
            return np.empty(0, _I64), np.empty(0), np.empty(0, _I64)
        t, v, c = zip(*rows)
        return np.array(t, _I64), np.array(v, np.float64), np.array(c, _I64)

    def observe(self, rec: RequestRecord, hist: Hist, lo_ns: int, hi_ns: int) -> None:
        _, v, c = self.arrays(rec, lo_ns, hi_ns)
        hist.record_many(v, c)


def chunk_arrays(rec: RequestRecord, lo_ns: int, hi_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival ns, tokens, in-window mask) of a record's chunks."""
    ts = np.asarray(rec.chunk_ns, dtype=_I64)
    ks = np.asarray(rec.chunk_tokens, dtype=_I64)
    return ts, ks, (ts >= lo_ns) & (ts < hi_ns)


def decode_time(rec: RequestRecord, reasoning: bool) -> tuple[int, int]:
    """(ns, tokens) of a record's reasoning chunks (``reasoning``) or answer chunks, the stream's first excepted:
    each chunk's gap to the chunk before it, of whichever kind, is the time its tokens took. A run of chunks
    [lo, hi) took ``ts[hi - 1] - ts[lo - 1]``, so interleaved kinds cost a few slices, not a loop per chunk."""
    ts, ks, n = rec.chunk_ns, rec.chunk_tokens, len(rec.chunk_ns)
    spans = rec.reasoning_spans
    if not reasoning:
        cuts = [0, *(i for span in spans for i in span), n]
        spans = [(lo, hi) for lo, hi in zip(cuts[::2], cuts[1::2])]
    ns = tokens = 0
    for lo, hi in spans:
        lo = max(lo, 1)
        if hi > lo:
            ns += ts[hi - 1] - ts[lo - 1]
            tokens += sum(ks[lo:hi])
    return ns, tokens


@dataclass(frozen=True)
class CrossoverSample:
    """One metric the crossover analysis compares, and where its per-window samples are read.

    ``kind`` says how a stage's timeline (loadgen/stage/timeline.py) gives one sample per window:
    "rate": counter ``series[0]`` per second; "ratio": ``series[0] / series[1]`` per window (windows
    where the latter is 0 skipped); "percentile": ``percentile`` of the window's histogram of
    ``series[0]`` in ms, windows with fewer than ``min_count`` samples skipped.
    """

    name: str
    label: str
    unit: str
    higher_is_better: bool
    kind: str
    series: tuple[str, ...]
    percentile: float = 0.0
    min_count: int = 0
    worse_with_spec: str = ""
    """Why this figure can be worse with speculation while throughput is better, said beside its comparison
    where it is (a latency figure explains; it does not decide: only the primary metric advises)."""


class Rate:
    """A stage figure per second (throughput, goodput) that is a crossover metric but no histogram."""

    name: str = ""
    label: str = ""
    unit: str = ""
    description: str = ""
    higher_is_better: bool = True
    kind: str = "rate"
    series: tuple[str, ...] = ()
    """The timeline counters it is read from (loadgen.stage.timeline.COUNTERS)."""

    def crossover_samples(self) -> tuple[CrossoverSample, ...]:
        return (CrossoverSample(self.name, self.label, self.unit, self.higher_is_better, self.kind, self.series),)


from loadgen.metrics.accept_length import AcceptLength  # noqa: E402
from loadgen.metrics.chunk_gap import ChunkGap  # noqa: E402
from loadgen.metrics.decode_rate import DecodeRate  # noqa: E402
from loadgen.metrics.dispatch_lag import DispatchLag  # noqa: E402
from loadgen.metrics.e2e import E2E  # noqa: E402
from loadgen.metrics.e2e_planned import E2EPlanned  # noqa: E402
from loadgen.metrics.goodput import Goodput  # noqa: E402
from loadgen.metrics.itl import ITL  # noqa: E402
from loadgen.metrics.output_throughput import OutputThroughput  # noqa: E402
from loadgen.metrics.output_tpot import OutputTPOT  # noqa: E402
from loadgen.metrics.reasoning_tokens import ReasoningTokens  # noqa: E402
from loadgen.metrics.reasoning_tpot import ReasoningTPOT  # noqa: E402
from loadgen.metrics.tokens_per_chunk import TokensPerChunk  # noqa: E402
from loadgen.metrics.tpot import TPOT  # noqa: E402
from loadgen.metrics.ttfo import TTFO  # noqa: E402
from loadgen.metrics.ttft import TTFT  # noqa: E402
from loadgen.metrics.ttft_planned import TTFTPlanned  # noqa: E402

# The order here is the order of run.json's summaries, of run.csv's columns and of the SLO fields.
REGISTRY: tuple[Metric, ...] = (TTFT(), ITL(), ChunkGap(), TPOT(), E2E(), TokensPerChunk(), AcceptLength(),
                                 TTFTPlanned(), E2EPlanned(), DispatchLag(), TTFO(), ReasoningTokens(),
                                 ReasoningTPOT(), OutputTPOT())
OPEN_LOOP_METRICS = ("ttft_planned", "e2e_planned", "dispatch_lag")
"""Metrics only an open-loop stage has samples of (its records carry a planned send time)."""

BY_NAME: dict[str, Metric] = {m.name: m for m in REGISTRY}
LATENCY_METRICS = tuple(m.name for m in REGISTRY if m.unit == "ms")
RATES: tuple[Rate, ...] = (OutputThroughput(), DecodeRate(), Goodput())
SLO_METRICS: tuple[Metric, ...] = tuple(m for m in REGISTRY if m.slo_key)
# crossover.json, its tables and the report list crossover metrics in this order: the rates, then percentiles
CROSSOVER: tuple[CrossoverSample, ...] = tuple(x for m in (*RATES, *REGISTRY) for x in m.crossover_samples())
