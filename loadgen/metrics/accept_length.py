from loadgen.metrics import Metric


class AcceptLength(Metric):
    name = "accept_length"
    unit = "tokens"
    scale = 1000.0
    divisor = 1.0
    label = "accept length"
    csv_stats = ("mean",)
    description = "server-reported tokens per verify step of each request (completion_tokens / spec_verify_ct)"

    def samples(self, rec, lo_ns, hi_ns):
        if rec.accept_length:
            yield rec.admit_ns, rec.accept_length, 1
