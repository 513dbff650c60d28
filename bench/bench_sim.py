"""Standalone entry point: python bench/bench_sim.py [options] (same as `loadgen bench sim`)."""

import sys

from loadgen.cli import main

raise SystemExit(main(["bench", "sim", *sys.argv[1:]]))
