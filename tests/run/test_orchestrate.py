"""Servers started by loadgen: healthy, never healthy, exiting, always stopped."""

import socket
import subprocess
import sys

import pytest

from loadgen.errors import LoadgenError
from loadgen.run.orchestrate import ManagedServer, ServerCommand


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_waits_for_health_and_stop_ends_the_process_group(live, tmp_path):
    port = free_port()
    cmd = ServerCommand("web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                        f"http://127.0.0.1:{port}/", log_path=tmp_path / "web.log", startup_timeout_s=30)
    with ManagedServer(cmd) as srv:
        assert srv.running
        pid = srv.proc.pid
    assert not srv.running
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_a_start_command_that_exits_is_one_line_with_its_log(live, tmp_path):
    cmd = ServerCommand("spec", [sys.executable, "-c", "import sys; print('CUDA out of memory'); sys.exit(3)"],
                        "http://127.0.0.1:9/health", log_path=tmp_path / "spec.log")
    with pytest.raises(LoadgenError) as e:
        ManagedServer(cmd).start()
    msg = str(e.value)
    assert "\n" not in msg and "status 3" in msg and "CUDA out of memory" in msg and "spec" in msg


def test_never_healthy_times_out_and_leaves_nothing_running(live, tmp_path):
    cmd = ServerCommand("base", [sys.executable, "-c", "import time; print('loading'); time.sleep(60)"],
                        f"http://127.0.0.1:{free_port()}/health", log_path=tmp_path / "b.log", startup_timeout_s=1.5)
    srv = ManagedServer(cmd)
    with pytest.raises(LoadgenError) as e:
        srv.start()
    assert "not healthy after 1.5 s" in str(e.value) and "loading" in str(e.value)
    assert not srv.running


def test_missing_binary(live, tmp_path):
    cmd = ServerCommand("x", "no-such-binary-xyz --port 1", "http://127.0.0.1:9/", log_path=tmp_path / "x.log")
    with pytest.raises(LoadgenError, match="cannot run 'no-such-binary-xyz'"):
        ManagedServer(cmd).start()
