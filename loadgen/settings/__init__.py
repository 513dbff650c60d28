"""Settings: what a user asks for, from flags, a TOML file or Locust options.

In: command-line arguments, ``--config`` TOML, Locust's parsed options. Out: typed settings
the run, analysis and report steps take. ``parse`` holds the value parsers (durations,
ladders, headers, SLOs) every front shares.
"""
