from loadgen.metrics import Metric


class ChunkGap(Metric):
    name = "chunk_gap"
    level = "chunk"
    description = "each later chunk's gap to the previous chunk, once per chunk (the verify-step cadence under speculation)"

    def samples(self, rec, lo_ns, hi_ns):
        ts = rec.chunk_ns
        for i in range(1, len(ts)):
            t = ts[i]
            if lo_ns <= t < hi_ns:
                yield t, (t - ts[i - 1]) / 1000, 1
