from loadgen.metrics import Metric


class TTFT(Metric):
    name = "ttft"
    description = "request written to the socket → first chunk carrying at least one token"

    def samples(self, rec, lo_ns, hi_ns):
        if rec.chunk_ns:
            yield rec.start_ns, (rec.chunk_ns[0] - rec.t0_ns) / 1000, 1
