"""The command line as a user runs it: ``python -m loadgen ARGS`` in a child process, and loopback ports.

Tests reach the child-process runner through the ``cli`` fixture (tests/cli/conftest.py), which puts them in the
live tier; input refused before anything starts is run in the test's own process (:func:`in_process`).
"""

from __future__ import annotations

import contextlib
import io
import socket
import subprocess
import sys


def loadgen(*args: str, timeout: float = 600, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nothing_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def start(*args: str, **kw) -> subprocess.Popen:
    """``python -m loadgen ARGS`` started, its stdout and stderr piped (text)."""
    return subprocess.Popen([sys.executable, "-m", "loadgen", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def stderr_until(p: subprocess.Popen, needle: str) -> str:
    """The child's stderr read line by line up to the first line holding ``needle`` (or to its end): a run
    says on stderr which stage it begins, so a test acts inside that stage whatever the host's speed."""
    seen = []
    for line in p.stderr:
        seen.append(line)
        if needle in line:
            break
    return "".join(seen)


def in_process(*args: str) -> subprocess.CompletedProcess:
    """``loadgen ARGS`` run in this process (loadgen.cli.main, whose streams it gives back): for input it refuses
    before any process or load starts, a fast-tier test. A test that reaches a child process here fails at once
    (tests/conftest.py): such input belongs with ``cli``."""
    from loadgen.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            rc = exc.code
    return subprocess.CompletedProcess(["loadgen", *args], rc, out.getvalue(), err.getvalue())
