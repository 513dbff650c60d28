from loadgen.metrics import Metric


class TPOT(Metric):
    name = "tpot"
    description = "(E2E − TTFT) / (output tokens − 1), one sample per request; its inverse is the per-user decode rate"

    def samples(self, rec, lo_ns, hi_ns):
        n = rec.output_tokens
        if rec.chunk_ns and n is not None and n > 1:
            yield rec.start_ns, (rec.end_ns - rec.chunk_ns[0]) / 1000 / (n - 1), 1
