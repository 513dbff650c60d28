"""The ``loadgen`` command: one subcommand per module, imported only when used.

In: a command line (flags derived from settings/knobs.py). Out: an exit status, the results written by the
pipeline (run.json and its answer file, report.html) and the terminal's text from report/terminal.py; a bad
input is one ``loadgen: error:`` line. Each module wires settings → run → analysis → report; none computes.
"""

from __future__ import annotations

import argparse
import difflib
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


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line naming the flag, with the nearest flag for a misspelt one; its usage dump
    is left out (37 lines before the useful one for ``loadgen crossover``): ``--help`` has it."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}{self._hint(message)}\n")

    def _flags(self) -> list[str]:
        """Every flag of this parser and of its subcommands."""
        out = list(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for p in action.choices.values():
                    out += list(p._option_string_actions)
        return sorted(set(out))

    def _hint(self, message: str) -> str:
        if message.startswith("unrecognized arguments: "):
            near = []
            for word in message.split(": ", 1)[1].split():
                flag = word.split("=", 1)[0]
                if flag.startswith("--"):
                    near += [f"{flag} → {m}" for m in difflib.get_close_matches(flag, self._flags(), n=1, cutoff=0.7)]
            return f" (did you mean: {', '.join(near)})" if near else ""
        if message.endswith("expected one argument"):
            flag = message.split()[1].rstrip(":")
            return f" (a value that starts with '-' is given as {flag}=VALUE)"
        return ""


def _parser(argv: list[str]) -> tuple[argparse.ArgumentParser, object | None]:
    parser = OneLineParser(prog="loadgen", description=__doc__)
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
