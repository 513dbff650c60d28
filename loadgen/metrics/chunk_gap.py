import numpy as np

from loadgen.metrics import Metric, chunk_arrays


class ChunkGap(Metric):
    name = "chunk_gap"
    level = "chunk"
    label = "chunk gap"
    csv_stats = ("p50", "p90", "p99")
    description = "each later chunk's gap to the previous chunk, once per chunk (the verify-step cadence under speculation)"

    def arrays(self, rec, lo_ns, hi_ns):
        ts, _, inside = chunk_arrays(rec, lo_ns, hi_ns)
        inside = inside[1:]
        later = ts[1:][inside]
        return later, (ts[1:] - ts[:-1])[inside] / 1000, np.ones(len(later), np.int64)
