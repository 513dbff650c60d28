from loadgen.metrics import Metric


class TTFTPlanned(Metric):
    name = "ttft_planned"
    label = "TTFT from plan"
    description = ("open loop: planned send time → first chunk carrying a token; TTFT plus the dispatch lag, "
                   "the wait a user of that schedule had")
    csv_stats = ("p50", "p99")
    crossover_percentiles = ((50, 3), (99, 20))

    def samples(self, rec, lo_ns, hi_ns):
        if rec.planned_ns and rec.chunk_ns:
            yield rec.admit_ns, (rec.chunk_ns[0] - rec.planned_ns) / 1000, 1
