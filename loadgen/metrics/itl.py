from loadgen.metrics import Metric, chunk_arrays


class ITL(Metric):
    name = "itl"
    label = "ITL"
    level = "chunk"
    description = "per token: each later chunk's gap ÷ its token count, recorded once per token"
    slo_key = "itl_ms"
    csv_stats = ("p50", "p90", "p99")
    crossover_percentiles = ((50, 3), (99, 20))
    # predictable text on the H200: throughput +35-43 % with n-gram speculation at C=1-16, ITL p99 worse at each
    worse_with_spec = {99: "accepted drafts arrive as bursts, so the gap after a burst is a whole verify step"}

    def arrays(self, rec, lo_ns, hi_ns):
        ts, ks, inside = chunk_arrays(rec, lo_ns, hi_ns)
        inside = inside[1:]
        later, k = ts[1:][inside], ks[1:][inside]
        gaps = (ts[1:] - ts[:-1])[inside]
        return later, gaps / 1000 / k, k

    def slo_value(self, rec):
        """The request's worst per-token ITL (its longest stall), over all its chunks."""
        ts, ks = rec.chunk_ns, rec.chunk_tokens
        worst = max(((ts[i] - ts[i - 1]) / ks[i] for i in range(1, len(ts))), default=0.0)
        return worst / 1e6
