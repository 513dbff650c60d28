from loadgen.metrics import Metric


class TTFO(Metric):
    name = "ttfo"
    label = "time to first output"
    description = ("request written to the socket → first chunk carrying answer (content) tokens, not reasoning: "
                   "TTFT plus the thinking of a reasoning model; summarised only where some request reasoned")
    csv_stats = ("p50", "p99")
    only_with = "reasoning_tokens"

    def samples(self, rec, lo_ns, hi_ns):
        if (ttfo := rec.ttfo_ns) is not None:
            yield rec.admit_ns, ttfo / 1000, 1
