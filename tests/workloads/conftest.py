"""Helpers shared by the workload tests."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from loadgen.request import GenRequest
from loadgen.workloads import Workload

REPO = Path(__file__).resolve().parents[2]
BUILTINS = ("code", "chat", "predictable", "freetext")


def take(workload: Workload, seed: int, n: int) -> list[GenRequest]:
    return list(itertools.islice(workload.requests(seed), n))


def dumps(requests: list[GenRequest]) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in requests)


def _run_cli(*args: str, extra_path: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real ``loadgen`` command in a fresh interpreter, importable from this checkout."""
    paths = [str(REPO)] + ([str(extra_path)] if extra_path else [])
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, env=full_env, timeout=120
    )


def make_dist(root: Path, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """A minimal installed distribution (dist-info + modules) in ``root``, found via sys.path."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[loadgen.workloads]\n{lines}\n")
    for mod, source in modules.items():
        (root / f"{mod}.py").write_text(source)
    return root


PLUGIN_SOURCE = '''
import itertools
from loadgen.request import GenRequest
from loadgen.workloads import Workload


class Echo(Workload):
    description = "echo test workload"

    def requests(self, seed):
        for i in itertools.count():
            yield GenRequest(workload=self.name, max_tokens=8, prompt=f"Say {seed}-{i} back to me.")


def make_multi():
    return Multi()


class Multi(Workload):
    name = "multi"
    description = "multi-turn test workload"

    def requests(self, seed):
        for i in itertools.count():
            yield GenRequest(workload=self.name, max_tokens=8, messages=(
                {"role": "user", "content": f"Question {i} about topic {seed}?"},
                {"role": "assistant", "content": f"Answer {i}, in some detail about topic {seed}."},
                {"role": "user", "content": f"Follow-up {i}?"},
            ))


NOT_A_WORKLOAD = 42
'''


@pytest.fixture
def cli():
    """Runs the real ``loadgen`` command: ``cli(*args, extra_path=None, env=None)``."""
    return _run_cli


@pytest.fixture
def wl():
    """Small helpers shared by these tests (pytest's importlib mode forbids importing conftest)."""
    return SimpleNamespace(take=take, dumps=dumps, repo=REPO, builtins=BUILTINS, make_dist=make_dist)


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Entry points: a good class, a good factory, one that fails to import, one of the wrong type."""
    root = make_dist(
        tmp_path / "site",
        "loadgen_test_plugins",
        {
            "echo": "lg_test_plugin:Echo",
            "multi": "lg_test_plugin:make_multi",
            "broken": "lg_test_missing_module:Thing",
            "wrongtype": "lg_test_plugin:NOT_A_WORKLOAD",
        },
        {"lg_test_plugin": PLUGIN_SOURCE},
    )
    monkeypatch.syspath_prepend(str(root))
    return root
