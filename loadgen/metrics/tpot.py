from loadgen.metrics import Metric


class TPOT(Metric):
    name = "tpot"
    label = "TPOT"
    description = "(E2E − TTFT) / (output tokens − 1), one sample per request; its inverse is the per-user decode rate"
    slo_key = "tpot_ms"
    csv_stats = ("p50", "p90", "p99")
    binned = True

    def samples(self, rec, lo_ns, hi_ns):
        n = rec.output_tokens
        if rec.chunk_ns and n is not None and n > 1:
            yield rec.admit_ns, (rec.end_ns - rec.chunk_ns[0]) / 1000 / (n - 1), 1

    def slo_value(self, rec):
        n = rec.output_tokens or 0
        if not rec.chunk_ns or n <= 1:
            return None  # one token has no time per output token: it meets any TPOT limit
        return (rec.end_ns - rec.chunk_ns[0]) / 1e6 / (n - 1)
