from loadgen.metrics import Metric


class DispatchLag(Metric):
    name = "dispatch_lag"
    label = "dispatch lag"
    description = ("open loop: request handed to the HTTP client − its planned send time (the arrival schedule's): "
                   "the client's own delay, a late timer, a busy loop, the in-flight cap. Writing it (a connect "
                   "included) comes after and is inside TTFT")
    csv_stats = ("p50", "p99")

    def samples(self, rec, lo_ns, hi_ns):
        if rec.planned_ns:
            yield rec.admit_ns, max(0, rec.start_ns - rec.planned_ns) / 1000, 1
