from loadgen.metrics import Metric, chunk_arrays


class ITL(Metric):
    name = "itl"
    level = "chunk"
    description = "per token: each later chunk's gap ÷ its token count, recorded once per token"

    def arrays(self, rec, lo_ns, hi_ns):
        ts, ks, inside = chunk_arrays(rec, lo_ns, hi_ns)
        inside = inside[1:]
        later, k = ts[1:][inside], ks[1:][inside]
        gaps = (ts[1:] - ts[:-1])[inside]
        return later, gaps / 1000 / k, k
