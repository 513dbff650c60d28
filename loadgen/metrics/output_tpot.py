from loadgen.metrics import Metric, decode_time


class OutputTPOT(Metric):
    name = "output_tpot"
    label = "output TPOT"
    description = ("the gaps before a request's answer chunks (the stream's first chunk left out) ÷ the tokens they "
                   "carried: the time per answer token; summarised only where some request reasoned")
    only_with = "reasoning_tokens"

    def samples(self, rec, lo_ns, hi_ns):
        if rec.chunk_ns:
            ns, tokens = decode_time(rec, reasoning=False)
            if tokens:
                yield rec.admit_ns, ns / 1000 / tokens, 1
