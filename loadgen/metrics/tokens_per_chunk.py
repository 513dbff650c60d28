from loadgen.metrics import Metric


class TokensPerChunk(Metric):
    name = "tokens_per_chunk"
    unit = "tokens"
    divisor = 1.0
    level = "chunk"
    description = "tokens carried by each chunk that carried any (first chunk included)"

    def samples(self, rec, lo_ns, hi_ns):
        for t, k in zip(rec.chunk_ns, rec.chunk_tokens):
            if lo_ns <= t < hi_ns:
                yield t, k, 1
