"""A third-party workload package, installed with pip into a fresh venv, is found and runs."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
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


def _running_environment_pth() -> str:
    """A .pth line that makes this interpreter's environment visible in another venv, .pth files included
    (loadgen's own editable install is one): whatever this environment is — a venv, a system Python, a
    pyenv one. ``--system-site-packages`` reaches the *base* interpreter's packages instead, and from a venv
    those lacked loadgen's dependencies and held setuptools 65.5, below what loadgen's build needs."""
    dirs = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()])
    return "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs if Path(d).is_dir()) + "\n"


def test_installed_entry_point_is_discovered(live, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (pkg / "haiku_workload.py").write_text(MODULE)
    venv = tmp_path / "venv"
    # No pip of its own (a few seconds saved): pip and loadgen's dependencies come from this environment
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "_running_environment.pth").write_text(_running_environment_pth())
    # each package builds with its own build requirements from the registry (pip's build isolation), as a
    # user's pip would, so the host's setuptools does not matter
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", str(pkg),
         "-e", str(REPO)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr[-3000:]
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
