"""The ``loadgen`` command: one subcommand per module, imported only when used."""

from __future__ import annotations

import argparse
import importlib
import sys

from loadgen.errors import LoadgenError

# subcommand -> (module, one-line help). Each module has register(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "sim": ("loadgen.cli.sim", "serve the SGLang-compatible simulated server"),
    "run": ("loadgen.cli.run", "run fixed-concurrency stages against one target"),
    "workloads": ("loadgen.cli.workloads", "list and show prompt workloads"),
    "bench": ("loadgen.cli.bench", "benchmarks of loadgen itself (client, simulator)"),
    "crossover": ("loadgen.cli.crossover", "baseline vs speculative ramp and crossover detection"),
    "capacity": ("loadgen.cli.capacity", "each configuration's highest request rate meeting percentile SLOs"),
    "report": ("loadgen.cli.report", "render a results directory as tables, JSON, CSV and HTML"),
}


def _parser(argv: list[str]) -> tuple[argparse.ArgumentParser, object | None]:
    parser = argparse.ArgumentParser(prog="loadgen", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    module = None
    for name, (modname, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_)
        if name == chosen:
            try:
                module = importlib.import_module(modname)
            except ModuleNotFoundError as exc:
                if exc.name != modname:
                    raise
                parser.error(f"'{name}' is not available in this version")
            module.register(p)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, module = _parser(argv)
    args = parser.parse_args(argv)
    if module is None:
        parser.print_help()
        return 2
    try:
        return int(module.run(args) or 0)
    except LoadgenError as exc:
        print(f"loadgen: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("loadgen: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
