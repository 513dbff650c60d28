"""loadgen's built-in prompt workloads: content written for this project, shipped as data.

Each module composes requests from a ``.jsonl`` file beside it, so that the prompts read as
real traffic of their kind (the simulator and real drafters judge acceptance from the text):

- ``code``: write, complete, explain and refactor code in nine languages;
- ``chat``: conversational questions and multi-turn histories;
- ``predictable``: copy, edit, fill-a-template and continue-a-sequence tasks whose output repeats
  the context;
- ``freetext``: stories, poems and brainstorming at temperature > 0.

Registered by name in :data:`loadgen.workloads.base.BUILTINS`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from importlib import resources

from loadgen.workloads.base import dealer

LANG_NAMES = {
    "python": "Python",
    "javascript": "JavaScript",
    "typescript": "TypeScript",
    "go": "Go",
    "rust": "Rust",
    "c": "C",
    "java": "Java",
    "sql": "SQL",
    "bash": "Bash",
}


def load(filename: str) -> list[dict]:
    """Records of a data file shipped in this package."""
    text = resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def snippets_by_lang(records: Sequence[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if r["kind"] == "snippet":
            out.setdefault(r["lang"], []).append(r)
    return out


def as_context(snippet: dict) -> str:
    """A snippet as surrounding code in a file that already has its own header.

    Go package clauses and script shebangs appear once per file, so they are dropped here.
    """
    lines = snippet["code"].splitlines()
    while lines and (lines[0].startswith(("package ", "#!")) or not lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines)


def code_context(pool: Sequence[dict], exclude: str, rng: random.Random) -> Callable[[random.Random], str] | None:
    """More code of the same language (never the snippet the prompt is about), for padding."""
    others = [as_context(s) for s in pool if s["name"] != exclude]
    return dealer(others, rng) if others else None
