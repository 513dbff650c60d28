from loadgen.metrics import Metric


class ReasoningTokens(Metric):
    name = "reasoning_tokens"
    unit = "tokens"
    divisor = 1.0
    label = "reasoning tokens"
    csv_stats = ("mean",)
    description = "tokens of a request's reasoning (thinking) chunks, one sample per request that streamed any"

    def samples(self, rec, lo_ns, hi_ns):
        if rec.reasoning_tokens:
            yield rec.admit_ns, rec.reasoning_tokens, 1
