from loadgen.metrics import Rate


class Goodput(Rate):
    name = "goodput_requests_per_s"
    label = "goodput"
    unit = "req/s"
    description = "window requests that completed and met every SLO ÷ the window's length (per window likewise)"
    series = ("good",)
