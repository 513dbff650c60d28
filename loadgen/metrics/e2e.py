from loadgen.metrics import Metric


class E2E(Metric):
    name = "e2e"
    description = "request written to the socket → end of the response stream"

    def observe(self, rec, hist, lo_ns, hi_ns):
        hist.record((rec.end_ns - rec.t0_ns) // 1000)
