"""Which unit of work one xdist worker takes whole (tests/conftest.py schedules by it; tests/e2e/conftest.py
stops a unit's servers when its last test is done)."""

from __future__ import annotations


def scope_of(nodeid: str) -> str:
    """Every test in tests/e2e is one of two units, ``vllm`` (test_vllm*.py: one worker holds the vLLM servers,
    never two sets) or ``llama`` (the rest: one worker holds the llama-servers while they run); any other module is
    its own (its module-scoped runs are made once)."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/e2e/"):
        return "vllm" if path.rsplit("/", 1)[-1].startswith("test_vllm") else "llama"
    return path
