"""``loadgen bench client|sim|crossover|dispatch|rates|faults|soak|switching|stopping``: benchmarks of loadgen itself, printing figures."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "client": "loadgen.bench.client_bench",
    "sim": "loadgen.bench.sim_bench",
    "crossover": "loadgen.bench.crossover_bench",
    "dispatch": "loadgen.bench.dispatch_bench",
    "rates": "loadgen.bench.rate_bench",
    "faults": "loadgen.bench.faults_bench",
    "soak": "loadgen.bench.soak_bench",
    "switching": "loadgen.bench.switching_bench",
    "stopping": "loadgen.bench.stopping_bench",
}


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=sorted(BENCHES), help="what to benchmark")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of that benchmark (--help for them)")


def run(args) -> int:
    return importlib.import_module(BENCHES[args.which]).main(args.rest)
