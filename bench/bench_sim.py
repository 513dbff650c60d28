"""Standalone entry for the simulator benchmark: ``python bench/bench_sim.py [--help]``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.errors import LoadgenError  # noqa: E402
from loadgen.sim.bench import main  # noqa: E402

if __name__ == "__main__":
    try:
        sys.exit(main())
    except LoadgenError as exc:
        print(f"loadgen: error: {exc}", file=sys.stderr)
        sys.exit(2)
