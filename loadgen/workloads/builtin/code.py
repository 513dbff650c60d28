"""``code``: write, complete, explain and refactor code in several languages.

Length control grows a prompt with other code of the same language, as the surrounding file
(or, for "write" tasks, as existing project code to match), so a long code prompt stays code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from loadgen.workloads.base import Draft, DraftWorkload, TextParts, deck, derive, text_draft
from loadgen.workloads.builtin import LANG_NAMES, code_context, load, snippets_by_lang

_COMPLETE = (
    "Complete the {Lang} code below: finish `{name}` so that it does what its name and comments say, "
    "and return the completed code.\n\n",
    "The {Lang} function `{name}` below was left unfinished. Write the rest of it and return the whole code.\n\n",
    "Fill in the missing part of `{name}` in this {Lang} code. Return the finished code only.\n\n",
)
_EXPLAIN = (
    "Explain what `{name}` in the following {Lang} code does, step by step, and point out any edge cases "
    "it does not handle.\n\n",
    "I found this {Lang} code in our repository. Can you explain how `{name}` works and when I would use it?\n\n",
    "Walk me through `{name}` in this {Lang} code line by line. What are its inputs, outputs and failure modes?\n\n",
)
_REFACTOR = (
    "Refactor `{name}` in the {Lang} code below to {goal}. Keep the behaviour the same and return the full "
    "updated code.\n\n",
    "Please improve this {Lang} code: {goal}. Return the complete rewritten code for `{name}`.\n\n",
)


@dataclass(frozen=True)
class _Task:
    kind: str  # complete | explain | refactor | write
    record: dict


class CodeWorkload(DraftWorkload):
    name = "code"
    description = "write, complete, explain and refactor code (Python, JS/TS, Go, Rust, C, Java, SQL, Bash)"

    def __init__(self) -> None:
        records = load("code.jsonl")
        self._pools = snippets_by_lang(records)
        self._tasks = [_Task(kind, r) for r in records if r["kind"] == "snippet" for kind in ("complete", "explain", "refactor")]
        self._tasks += [_Task("write", r) for r in records if r["kind"] == "task"]

    def _draft(self, task: _Task, rng) -> Draft:
        r = task.record
        lang = r["lang"]
        fill = {"Lang": LANG_NAMES[lang], "name": r.get("name", ""), "goal": r.get("refactor", "")}
        pool = self._pools.get(lang, [])
        if task.kind == "write":
            parts = TextParts(
                head="",
                tail=r["text"],
                more=code_context(pool, exclude="", rng=rng),
                wrap=(f"Here is some existing {fill['Lang']} code from the same project, for context and style:\n\n```{lang}\n", "\n```\n\n"),
            )
            max_tokens = 384
        else:
            phrasing = {"complete": _COMPLETE, "explain": _EXPLAIN, "refactor": _REFACTOR}[task.kind]
            code = r["code"]
            if task.kind == "complete":
                code = "\n".join(code.splitlines()[: r["cut"]])
            parts = TextParts(
                head=rng.choice(phrasing).format(**fill) + f"```{lang}\n",
                tail=code + "\n```",
                more=code_context(pool, exclude=r["name"], rng=rng),
                wrap=("", "\n\n"),
            )
            max_tokens = {"complete": 256, "explain": 320, "refactor": 384}[task.kind]
        return text_draft(self.name, parts, max_tokens, temperature=0.0, seed=rng.getrandbits(31))

    def drafts(self, seed: int) -> Iterator[Draft]:
        rng = derive(seed, self.name)
        for task in deck(self._tasks, rng):
            yield self._draft(task, rng)
