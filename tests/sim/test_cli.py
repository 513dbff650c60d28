"""The command line: one-line errors (never a traceback), the listening line, --expect."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from loadgen.errors import LoadgenError
from loadgen.sim.process import SimProcess


def _sim(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen", "sim", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def _one_line_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loadgen: error: ") and needle in lines[0], p.stderr


def test_unknown_and_bad_profile(live, tmp_path):
    _one_line_error(_sim("--profile", "nope", "--port", "0"), "unknown profile 'nope'")
    bad = tmp_path / "bad.toml"
    bad.write_text("[cost\n")
    _one_line_error(_sim("--profile", str(bad), "--port", "0"), "bad profile file")


def test_port_in_use(live):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _one_line_error(_sim("--port", str(port)), f"cannot listen on 127.0.0.1:{port}")


def test_expect_prints_table_and_crossover(live):
    p = _sim("--profile", "pcie-8gpu-eagle3", "--expect", "1,10,30,250")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(line.split()[:1] == ["250"] for line in lines)
    assert "true crossover: C = 1" in p.stdout and "spec wins above" in p.stdout


def test_listening_line_and_simprocess_error(live):
    with SimProcess(time_scale=10, cpu=0) as sim:
        assert sim.url.startswith("http://127.0.0.1:")
    with pytest.raises(LoadgenError, match="unknown profile"):
        SimProcess(profile="nope").start()
