"""Settings: what a user asks for, from flags, a TOML file or Locust options.

In: command-line arguments, ``--config`` TOML, Locust's parsed options. Out: typed settings
the run, analysis and report steps take. ``knobs`` defines every knob once (flag, old names,
help, parser, default, TOML key, fronts); ``flags`` derives the argparse flags and Locust
options from it; ``config`` the TOML config and its checks; ``parse`` holds the value
parsers (durations, ladders, headers, SLOs) every front shares.
"""
