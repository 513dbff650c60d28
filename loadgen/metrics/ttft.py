from loadgen.metrics import Metric


class TTFT(Metric):
    name = "ttft"
    label = "TTFT"
    description = "request written to the socket → first chunk carrying at least one token"
    slo_key = "ttft_ms"
    csv_stats = ("p50", "p90", "p99")
    crossover_percentiles = ((50, 3), (99, 20))

    def samples(self, rec, lo_ns, hi_ns):
        if rec.chunk_ns:
            yield rec.admit_ns, (rec.chunk_ns[0] - rec.t0_ns) / 1000, 1

    def slo_value(self, rec):
        # open loop: from the planned send, the wait a user of that schedule had
        return (rec.chunk_ns[0] - rec.user_t0_ns) / 1e6 if rec.chunk_ns else None
