from loadgen.metrics import Rate


class DecodeRate(Rate):
    name = "decode_rate"
    label = "per-user decode rate"
    unit = "tok/s"
    description = "per window, the mean over the requests started in it of (output tokens − 1) ÷ (end − first chunk)"
    kind = "ratio"
    series = ("decode_rate_sum", "decode_rate_n")
