"""The metric registry: one module per metric, each saying what one sample is.

Definitions are in docs/metrics.md and nowhere else. A metric is either
request-level (one sample per request that started inside the stage's steady
window and completed) or chunk-level (samples from every chunk that arrived
inside the steady window, whichever request it belongs to).
"""

from __future__ import annotations

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


from loadgen.metrics.accept_length import AcceptLength  # noqa: E402
from loadgen.metrics.chunk_gap import ChunkGap  # noqa: E402
from loadgen.metrics.e2e import E2E  # noqa: E402
from loadgen.metrics.itl import ITL  # noqa: E402
from loadgen.metrics.tokens_per_chunk import TokensPerChunk  # noqa: E402
from loadgen.metrics.tpot import TPOT  # noqa: E402
from loadgen.metrics.ttft import TTFT  # noqa: E402

REGISTRY: tuple[Metric, ...] = (TTFT(), ITL(), ChunkGap(), TPOT(), E2E(), TokensPerChunk(), AcceptLength())
BY_NAME: dict[str, Metric] = {m.name: m for m in REGISTRY}
LATENCY_METRICS = ("ttft", "itl", "chunk_gap", "tpot", "e2e")
