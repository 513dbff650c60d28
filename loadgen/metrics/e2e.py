from loadgen.metrics import Metric


class E2E(Metric):
    name = "e2e"
    description = "request written to the socket → end of the response stream"

    def samples(self, rec, lo_ns, hi_ns):
        yield rec.start_ns, (rec.end_ns - rec.t0_ns) / 1000, 1
