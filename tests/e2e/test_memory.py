"""Too little memory for the real servers is one line naming both figures: before a server starts (never the
kernel's OOM killer), and for the whole suite (the real-server tests deselected, the run failed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from . import memory
from .llama import LlamaServer, ServerError, live_servers
from .runs import REPO


def test_a_server_that_does_not_fit_is_refused_before_it_starts(tmp_path) -> None:
    """No process is started (this test is in the fast tier, where starting one fails it)."""
    need = memory.meminfo("MemAvailable") + int(5 * memory.GB)
    srv = LlamaServer(model=tmp_path / "m.gguf", binary=tmp_path / "llama-server", name="huge", memory_bytes=need)
    with pytest.raises(ServerError) as e:
        srv.start()
    (line,) = str(e.value).splitlines()
    assert line.startswith(f"llama-server (huge) needs about {need / memory.GB:.1f} GB of memory to start; "), line
    assert line.endswith("GB is available (MemAvailable)"), line
    assert srv.proc is None and srv not in live_servers()


def test_the_suites_need_is_named_against_the_machine(monkeypatch) -> None:
    monkeypatch.setenv("LOADGEN_TEST_MEMORY_BYTES", str(int(8e9)))
    why = memory.real_servers_refused()
    assert why == (f"this machine has 8.0 GB of memory; the real-server tests need {memory.REAL_SERVERS_BYTES / 1e9:.1f} GB "
                   f"(3 vLLM servers of {memory.VLLM_SERVER_BYTES / 1e9:.1f} GB, 3 llama-servers of "
                   f"{memory.LLAMA_SERVER_BYTES / 1e9:.1f} GB and the suite's {memory.SUITE_BYTES / 1e9:.1f} GB)")
    monkeypatch.setenv("LOADGEN_TEST_MEMORY_BYTES", str(memory.REAL_SERVERS_BYTES))
    assert memory.real_servers_refused() is None


def test_a_small_machine_runs_no_real_server_test_and_fails_saying_why(live, tmp_path, monkeypatch) -> None:
    """pytest on a real-server module, as on a machine of 8 GB: nothing of it runs, one line says why, the
    exit status is a failure (a real-server test that never runs must not pass); the set-up says the same and
    builds nothing for them."""
    monkeypatch.setenv("LOADGEN_TEST_MEMORY_BYTES", str(int(8e9)))
    monkeypatch.setenv("LOADGEN_CACHE", str(tmp_path / "cache"))
    why, env = memory.real_servers_refused(), dict(os.environ)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e/test_llama_smoke.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout[-3000:]
    lines = [line for line in p.stdout.splitlines() if "the real-server tests did not run" in line]
    assert lines == [f"FAILED: the real-server tests did not run: {why}"], p.stdout[-3000:]
    assert " passed" not in p.stdout and "deselected" in p.stdout, p.stdout[-3000:]
    s = subprocess.run([sys.executable, "-m", "tests.e2e.setup"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert f"setup: {why}: the real-server tests will not run and the suite will fail" in s.stdout, s.stdout
    assert not (tmp_path / "cache" / "llama-server").exists() and not (tmp_path / "cache" / "vllm").exists()
