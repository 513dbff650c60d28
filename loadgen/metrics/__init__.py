"""The metric registry: one module per metric, each saying what one sample is.

Definitions are in docs/metrics.md and nowhere else. A metric is either
request-level (one sample per request that started inside the stage's steady
window and completed) or chunk-level (samples from every chunk that arrived
inside the steady window, whichever request it belongs to).
"""

from __future__ import annotations

from loadgen.histograms import Hist
from loadgen.record import RequestRecord


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
        """
        raise NotImplementedError

    def observe(self, rec: RequestRecord, hist: Hist, lo_ns: int, hi_ns: int) -> None:
        for _, v, c in self.samples(rec, lo_ns, hi_ns):
            hist.record_float(v, c)


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
