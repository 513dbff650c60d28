from loadgen.metrics import Rate


class OutputThroughput(Rate):
    name = "output_tokens_per_s"
    label = "output throughput"
    unit = "tok/s"
    description = "tokens whose chunk arrived in the window ÷ its length; per window, the window's tokens ÷ its length"
    series = ("tokens",)
