from loadgen.metrics import Metric


class ITL(Metric):
    name = "itl"
    level = "chunk"
    description = "per token: each later chunk's gap ÷ its token count, recorded once per token"

    def samples(self, rec, lo_ns, hi_ns):
        ts, ks = rec.chunk_ns, rec.chunk_tokens
        for i in range(1, len(ts)):
            t = ts[i]
            if lo_ns <= t < hi_ns:
                k = ks[i]
                yield t, (t - ts[i - 1]) / 1000 / k, k
