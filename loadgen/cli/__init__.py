"""The ``loadgen`` command: one subcommand per module, imported only when used.

In: a command line (flags derived from settings/knobs.py). Out: an exit status, the results written by the
pipeline (run.json and its answer file, report.html) and the terminal's text from report/terminal.py; a bad
input is one ``loadgen: error:`` line. Each module wires settings → run → analysis → report; none computes.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from loadgen import redact
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
    # What a command prints (argparse's errors included) goes out with its secrets masked (loadgen/redact.py);
    # a caller's own streams are given back, a process's stay masked to its end (a traceback included).
    in_process = argv is not None
    argv = sys.argv[1:] if argv is None else argv
    streams = redact.guard_streams()
    try:
        parser, module = _parser(argv)
        args = parser.parse_args(argv)
        if module is None:
            parser.print_help()
            return 2
        return int(module.run(args) or 0)
    except LoadgenError as exc:
        print(f"loadgen: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("loadgen: interrupted", file=sys.stderr)
        return 130
    finally:
        if in_process:
            redact.unguard_streams(streams)


if __name__ == "__main__":
    sys.exit(main())
