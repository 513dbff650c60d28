from loadgen.metrics import Metric


class E2EPlanned(Metric):
    name = "e2e_planned"
    label = "E2E from plan"
    description = "open loop: planned send time → end of the response stream"
    csv_stats = ("p50", "p99")
    crossover_percentiles = ((50, 3), (99, 20))

    def samples(self, rec, lo_ns, hi_ns):
        if rec.planned_ns:
            yield rec.admit_ns, (rec.end_ns - rec.planned_ns) / 1000, 1
