"""``loadgen workloads list`` and ``loadgen workloads show NAME``."""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import orjson

from loadgen.errors import LoadgenError
from loadgen.workloads import Lengths, available, prompt_tokens, resolve

_PREVIEW_LINES = 24


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """Length-control options, shared by every command that takes a workload spec."""
    parser.add_argument(
        "--prompt-tokens",
        metavar="DIST",
        help="target prompt length in tokens: N, normal:MEAN,STD or uniform:LOW,HIGH "
        "(grown or cut with content of the workload's own kind)",
    )
    # --max-tokens is what `loadgen run` calls it; both spellings work here.
    parser.add_argument(
        "--output-tokens", "--max-tokens", dest="output_tokens", metavar="DIST",
        help="max output tokens: N, normal:MEAN,STD or uniform:LOW,HIGH",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="'builtin' (default) or a Hugging Face tokenizer.json / model folder (needs the 'tokenizers' package)",
    )
    parser.add_argument("--ignore-eos", action="store_true", help="ask the server to generate exactly max tokens")


def lengths_from_args(args: argparse.Namespace) -> Lengths:
    return Lengths.parse(args.prompt_tokens, args.output_tokens, args.tokenizer, args.ignore_eos)


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("list", help="built-in and installed (entry-point) workloads")
    show = sub.add_parser("show", help="sample requests of a workload, with token counts")
    show.add_argument("name", metavar="NAME", help="a workload name, .jsonl/.json path, sharegpt:PATH or mix code:2,chat:1")
    show.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    show.add_argument("-n", type=int, default=3, help="how many requests (default 3)")
    show.add_argument("--full", action="store_true", help="print whole prompts instead of a preview")
    show.add_argument("--json", action="store_true", help="print each request as one JSON line, exactly as generated")
    add_workload_arguments(show)


def _list() -> int:
    rows = []
    for name in available():
        try:
            description = resolve(name).description
        except LoadgenError as exc:  # one broken plugin must not hide the others
            description = f"(unavailable: {exc})"
        rows.append((name, description))
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return 0


def _preview(text: str, full: bool) -> str:
    lines = text.splitlines() or [""]
    if full or len(lines) <= _PREVIEW_LINES:
        return text
    return "\n".join(lines[:_PREVIEW_LINES]) + f"\n… ({len(lines) - _PREVIEW_LINES} more lines; --full shows all)"


def _show(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise LoadgenError(f"-n {args.n}: must be at least 1")
    lengths = lengths_from_args(args)
    workload = resolve(args.name, lengths)
    out = sys.stdout
    for i, req in enumerate(itertools.islice(workload.requests(args.seed), args.n), 1):
        if args.json:
            out.write(orjson.dumps(req).decode() + "\n")
            continue
        kind = "prompt" if req.prompt is not None else f"{len(req.messages or ())} messages"
        out.write(
            f"--- #{i} workload={req.workload} {kind} prompt_tokens={prompt_tokens(req, lengths.tokenizer)} "
            f"max_tokens={req.max_tokens} temperature={req.temperature:g} top_p={req.top_p:g}\n"
        )
        if req.prompt is not None:
            out.write(_preview(req.prompt, args.full) + "\n")
        else:
            for m in req.messages or ():
                out.write(f"[{m['role']}] {_preview(m['content'], args.full)}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return _list() if args.action == "list" else _show(args)
    except BrokenPipeError:
        # `loadgen workloads show ... | head` closes the pipe early, which is not an error; point
        # stdout at devnull so the interpreter's final flush does not fail either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
