"""The harness itself: failures name their step and log, and no server outlives its test."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from .llama import BuildError, LlamaServer, ServerError, _run_step, ensure_llama_server, file_lock

REPO = Path(__file__).resolve().parents[2]

# every test here starts a process (a build step, a fake binary, a lock holder, a server)
pytestmark = pytest.mark.usefixtures("live")


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie left to an init that does not reap counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def test_failed_build_step_names_step_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    cmd = [sys.executable, "-c", "print('compiling x.cpp'); print('error: boom'); raise SystemExit(2)"]
    with pytest.raises(BuildError) as ei:
        _run_step("build", cmd, log, timeout=60)
    msg = str(ei.value)
    assert "step 'build' failed (2)" in msg
    assert "error: boom" in msg and str(log) in msg
    assert "error: boom" in log.read_text()


def test_step_timeout_is_reported(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="'configure' failed.*timeout"):
        _run_step("configure", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "l",
                  timeout=0.5)


def test_override_binary_that_does_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LOADGEN_LLAMA_SERVER", str(fake))
    with pytest.raises(BuildError, match="does not answer --version"):
        ensure_llama_server()


def _lock_waiters(path: Path) -> int:
    """Processes (or threads) blocked on ``path``'s flock, as the kernel lists them in /proc/locks."""
    ino = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and ino in line)


def test_build_lock_is_exclusive_across_processes(tmp_path: Path) -> None:
    lock, released = tmp_path / ".lock", tmp_path / "released"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from pathlib import Path
            from tests.e2e.llama import file_lock
            with file_lock(Path({str(lock)!r})):
                print('held', flush=True)
                sys.stdin.readline()
                Path({str(released)!r}).write_text('released')
        """)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        # held by the other process: not to be had now
        with open(lock, "a+") as f, pytest.raises(BlockingIOError):
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        got: list[bool] = []

        def take() -> None:
            with file_lock(lock):
                got.append(released.exists())

        waiter = threading.Thread(target=take, daemon=True)
        waiter.start()
        deadline = time.monotonic() + 60
        while not _lock_waiters(lock):  # file_lock waits for the holder ...
            assert time.monotonic() < deadline and waiter.is_alive(), "file_lock neither waited nor returned"
            time.sleep(0.01)
        assert got == []
        holder.stdin.write("\n")  # ... which lets go only after writing its marker
        holder.stdin.flush()
        waiter.join(timeout=60)
        assert got == [True]
    finally:
        holder.kill()
        holder.wait()


def test_server_that_cannot_load_its_model_reports_log_tail(llama_binary: Path, tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is not a gguf file" * 100)
    srv = LlamaServer(model=bad, binary=llama_binary, log_path=tmp_path / "server.log")
    with pytest.raises(ServerError) as ei:
        with srv:
            pass
    msg = str(ei.value)
    assert "exited" in msg and str(tmp_path / "server.log") in msg
    assert "gguf" in msg.lower()  # the tail of llama-server's own log
    assert srv.proc is None


def test_startup_timeout_stops_the_server(llama_binary: Path, llama_model: Path) -> None:
    srv = LlamaServer(model=llama_model, binary=llama_binary, startup_timeout=0.05)
    with pytest.raises(ServerError, match="not healthy after"):
        srv.start()
    assert srv.proc is None and not srv.alive()


def test_server_is_stopped_when_the_test_body_fails(llama_binary: Path, llama_model: Path) -> None:
    with pytest.raises(RuntimeError, match="test failed"):
        with LlamaServer(model=llama_model, binary=llama_binary, spec=True) as srv:
            pid = srv.proc.pid
            assert srv.health() == 200
            assert srv.metrics()["llamacpp:requests_processing"] == 0
            raise RuntimeError("test failed")
    assert _gone(pid)
    assert srv.health() is None


def test_server_that_dies_mid_run_is_reported(llama_binary: Path, llama_model: Path) -> None:
    with LlamaServer(model=llama_model, binary=llama_binary) as srv:
        srv.ensure_alive()
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=10)
        with pytest.raises(ServerError, match=r"died with exit -9(.|\n)*tail:"):
            srv.ensure_alive()
    assert not srv.alive()
    with pytest.raises(ServerError, match="not running"):
        srv.ensure_alive()


def test_server_dies_with_a_killed_test_process(llama_binary: Path, llama_model: Path) -> None:
    # A test process killed by SIGKILL runs no cleanup: PR_SET_PDEATHSIG takes the server down.
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from tests.e2e.llama import LlamaServer
        srv = LlamaServer(model=Path({str(llama_model)!r}), binary=Path({str(llama_binary)!r})).start()
        print(srv.proc.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline().strip()
        assert line.isdigit(), line
        pid = int(line)
        assert not _gone(pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_gone(pid), f"llama-server {pid} outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
