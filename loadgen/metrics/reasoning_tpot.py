from loadgen.metrics import Metric, decode_time


class ReasoningTPOT(Metric):
    name = "reasoning_tpot"
    label = "reasoning TPOT"
    description = ("the gaps before a request's reasoning chunks (the stream's first chunk left out) ÷ the tokens they "
                   "carried: the time per reasoning token")

    def samples(self, rec, lo_ns, hi_ns):
        if rec.reasoning_spans:
            ns, tokens = decode_time(rec, reasoning=True)
            if tokens:
                yield rec.admit_ns, ns / 1000 / tokens, 1
