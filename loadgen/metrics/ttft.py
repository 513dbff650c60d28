from loadgen.metrics import Metric


class TTFT(Metric):
    name = "ttft"
    description = "request written to the socket → first chunk carrying at least one token"

    def observe(self, rec, hist, lo_ns, hi_ns):
        if rec.chunk_ns:
            hist.record((rec.chunk_ns[0] - rec.t0_ns) // 1000)
