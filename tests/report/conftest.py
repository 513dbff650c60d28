import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.report.html import render
from tests.report.synth import run_doc, write_run


@dataclass
class Rendered:
    dir: Path
    html: str


@pytest.fixture(scope="session")
def synth_run(tmp_path_factory) -> Path:
    """A 16-stage synthetic run folder (2 workloads × 4 concurrencies × 2 targets, with flags): run.json only."""
    return write_run(tmp_path_factory.mktemp("synth") / "run", run_doc())


@pytest.fixture(scope="session")
def rendered(synth_run, tmp_path_factory) -> Rendered:
    """The synthetic run rendered once from scratch (the bootstrap runs once per session); tests only read it."""
    out = tmp_path_factory.mktemp("rendered") / "run"
    shutil.copytree(synth_run, out)
    html = render(out)
    return Rendered(out, html.read_text(encoding="utf-8"))


@pytest.fixture
def synth_dir(rendered, tmp_path) -> Path:
    """A private copy of run.json + its up-to-date crossover.json, for tests that change things."""
    out = tmp_path / "run"
    out.mkdir()
    for name in ("run.json", "crossover.json"):
        shutil.copy(rendered.dir / name, out / name)
    future = time.time() + 5
    os.utime(out / "crossover.json", (future, future))  # copy order must not make it look stale
    return out
