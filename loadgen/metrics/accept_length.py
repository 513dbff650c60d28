from loadgen.metrics import Metric


class AcceptLength(Metric):
    name = "accept_length"
    unit = "tokens"
    scale = 1000.0
    divisor = 1.0
    description = "server-reported tokens per verify step of each request (completion_tokens / spec_verify_ct)"

    def observe(self, rec, hist, lo_ns, hi_ns):
        if rec.accept_length:
            hist.record_float(rec.accept_length)
