"""``loadgen capacity``: each configuration's highest request rate meeting percentile SLOs, with its interval.

In: the crossover's flags (it is ``loadgen crossover --rate … --capacity SLOS``: the same targets,
simulators, TOML and outputs), with ``--capacity`` and ``--rate`` required. Out: what that run
writes (run.json, rates.json) and says, led by the sentence "with spec, capacity under TTFT p99 ≤
X and TPOT p50 ≤ Y is A req/s (interval) against B for the baseline".
"""

from __future__ import annotations

import argparse

from loadgen.cli import crossover
from loadgen.errors import LoadgenError


def register(p: argparse.ArgumentParser) -> None:
    crossover.register(p)
    p.epilog = """examples:
  loadgen capacity --rate 3,6,10,15 --capacity ttft_p99=160ms,tpot_p50=8ms --duration 10s
      the embedded simulator: each configuration's highest rate meeting both SLOs
  loadgen capacity --baseline-url http://gpu:8000 --spec-url http://gpu:8001 --protocol chat \\
      --model Qwen/Qwen3-8B --rate 1,2,4,8 --capacity ttft_p99=800ms,tpot_p50=40ms
      two vLLM servers, Poisson arrivals from 1 to 8 req/s and up until the SLOs fail"""


def run(args) -> int:
    if args.resume:  # the run's own flags (loadgen/cli/front.resumed_args), or the ones given, checked there
        return crossover.run(args)
    if not args.from_ and not args.capacity:
        raise LoadgenError("loadgen capacity needs --capacity SLOS, e.g. --capacity ttft_p99=800ms,tpot_p50=40ms")
    if not args.from_ and not (args.rate or args.trace):
        raise LoadgenError("loadgen capacity needs a --rate ladder to start the search from, e.g. --rate 1,2,4,8")
    return crossover.run(args)
