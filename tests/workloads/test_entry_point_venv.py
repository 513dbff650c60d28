"""A third-party workload package, installed with pip into a fresh venv, is found and runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "loadgen-haiku-workload"
version = "0.1"

[project.entry-points."loadgen.workloads"]
haiku = "haiku_workload:HaikuWorkload"

[tool.setuptools]
py-modules = ["haiku_workload"]
"""

MODULE = '''
import itertools
import random

from loadgen.request import GenRequest
from loadgen.workloads import Workload

SEASONS = ["spring rain", "summer dusk", "autumn wind", "winter moon"]


class HaikuWorkload(Workload):
    name = "haiku"
    description = "haiku about the seasons (test plugin)"

    def requests(self, seed):
        rng = random.Random(seed)
        for i in itertools.count():
            yield GenRequest(workload=self.name, max_tokens=40, temperature=0.9,
                             prompt=f"Write a haiku about {rng.choice(SEASONS)}. ({i})")
'''


def test_installed_entry_point_is_discovered(live, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "haiku_workload.py").write_text(MODULE)
    venv = tmp_path / "venv"
    # No pip of its own: the system one (and setuptools, loadgen's deps) come through
    # --system-site-packages, which keeps this test to a few seconds.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         str(pkg), "-e", str(REPO)],
        check=True, capture_output=True, text=True, cwd=tmp_path,
    )
    loadgen = venv / "bin" / "loadgen"
    listed = subprocess.run([str(loadgen), "workloads", "list"], capture_output=True, text=True, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[0] == "haiku" and "test plugin" in line for line in listed.stdout.splitlines())
    shown = subprocess.run(
        [str(loadgen), "workloads", "show", "haiku:1,predictable:1", "-n", "6", "--seed", "2"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert "workload=haiku" in shown.stdout and "Write a haiku about" in shown.stdout
