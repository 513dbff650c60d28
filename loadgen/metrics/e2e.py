from loadgen.metrics import Metric


class E2E(Metric):
    name = "e2e"
    label = "E2E"
    description = "request written to the socket → end of the response stream"
    slo_key = "e2e_ms"
    csv_stats = ("p50", "p90", "p99")

    def samples(self, rec, lo_ns, hi_ns):
        yield rec.admit_ns, (rec.end_ns - rec.t0_ns) / 1000, 1

    def slo_value(self, rec):
        return (rec.end_ns - rec.user_t0_ns) / 1e6  # open loop: from the planned send
