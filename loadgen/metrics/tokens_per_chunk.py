import numpy as np

from loadgen.metrics import Metric, chunk_arrays


class TokensPerChunk(Metric):
    name = "tokens_per_chunk"
    unit = "tokens"
    divisor = 1.0
    level = "chunk"
    label = "tokens per chunk"
    csv_stats = ("mean",)
    description = "tokens carried by each chunk that carried any (first chunk included)"

    def arrays(self, rec, lo_ns, hi_ns):
        ts, ks, inside = chunk_arrays(rec, lo_ns, hi_ns)
        t = ts[inside]
        return t, ks[inside].astype(np.float64), np.ones(len(t), np.int64)
