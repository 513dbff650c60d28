"""Session fixtures for the end-to-end suite: a baseline and an n-gram speculative llama-server, and real vLLM
servers (tests/e2e/vllm.py): a baseline and two n-gram sizes.

tests/run.sh builds llama-server, assembles the model and installs vLLM into ``$LOADGEN_CACHE`` (default
``~/.cache/loadgen``) before pytest starts (tests/e2e/setup.py: 7-8 min cold on 2 cores); run without it, the
fixtures do the same on first use. A llama-server starts in about a second, a vLLM server in about a minute.
``LOADGEN_SKIP_E2E=1`` skips the suite.

On a machine with more than one core the llama-servers are pinned to the last core
(``LOADGEN_E2E_SERVER_CPU`` picks another, ``-1`` disables pinning) and the vLLM servers to the
first (``LOADGEN_E2E_VLLM_CPU``), so each group's load client, left on the other cores, does not
compete with its servers for the CPU.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from .llama import LlamaServer, binary_version, live_servers, ensure_llama_server, ensure_model, server_binary_path
from .memory import real_servers_refused
from .scopes import scope_of
from .vllm import VllmServer, ensure_vllm, ensure_vllm_model, spec_config

# Timeout for a test that may have to build llama-server first (pyproject's default is
# 600 s; the build alone takes 7-20 min on 2 cores).
BUILD_TIMEOUT_S = 3000


def _real_server_test(item: pytest.Item) -> bool:
    return _uses(item, "llama_binary") or _uses(item, "vllm_python")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs the servers ``e2e``, and, only while llama-server is not
    built yet on this machine, give those tests room for the build. On a machine with too little memory
    for the real servers they are deselected, and the run fails (``pytest_sessionfinish``)."""
    if real_servers_refused():
        out = [it for it in items if _real_server_test(it)]
        items[:] = [it for it in items if not _real_server_test(it)]
        config.hook.pytest_deselected(items=out)
    needs = [it for it in items if "llama_binary" in getattr(it, "fixturenames", ())]
    building = not os.environ.get("LOADGEN_LLAMA_SERVER") and binary_version(server_binary_path()) is None
    for it in needs:
        it.add_marker(pytest.mark.e2e)
        if building:
            it.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S))
    # a vLLM test's set-up may install vLLM (about 2 min), convert the model (70-85 s) and start two servers
    # (60-70 s each, quiet): room for all of it on a busy host
    for it in items:
        if "vllm_python" in getattr(it, "fixturenames", ()):
            it.add_marker(pytest.mark.e2e)
            it.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if real_servers_refused() and not hasattr(session.config, "workerinput"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if (why := real_servers_refused()) and not hasattr(config, "workerinput"):
        terminalreporter.write_line(f"FAILED: the real-server tests did not run: {why}", red=True)


def _server_cpu(env_name: str = "LOADGEN_E2E_SERVER_CPU", index: int = -1) -> int | None:
    env = os.environ.get(env_name)
    if env is not None:
        cpu = int(env)
        return None if cpu < 0 else cpu
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[index] if len(cpus) > 1 else None


@pytest.fixture(autouse=True)
def _llama_servers_stay_alive() -> Iterator[None]:
    """After each e2e test: a server that died during it is reported, with its log tail."""
    yield
    for srv in live_servers():
        srv.ensure_alive()


@pytest.fixture(scope="session")
def llama_binary(live) -> Path:
    if os.environ.get("LOADGEN_SKIP_E2E") == "1":
        pytest.skip("LOADGEN_SKIP_E2E=1")
    return ensure_llama_server()


@pytest.fixture(scope="session")
def llama_model(live) -> Path:
    if os.environ.get("LOADGEN_SKIP_E2E") == "1":
        pytest.skip("LOADGEN_SKIP_E2E=1")
    return ensure_model()


@pytest.fixture(scope="session")
def llama_server_cpu() -> int | None:
    """The core the servers are pinned to (None: not pinned)."""
    return _server_cpu()


@pytest.fixture(scope="session")
def llama_baseline_server(llama_binary: Path, llama_model: Path,
                          llama_server_cpu: int | None) -> Iterator[LlamaServer]:
    with LlamaServer(model=llama_model, binary=llama_binary, spec=False, cpu=llama_server_cpu) as srv:
        _LLAMA.append(srv)
        yield srv


@pytest.fixture(scope="session")
def llama_spec_server(llama_binary: Path, llama_model: Path,
                      llama_server_cpu: int | None) -> Iterator[LlamaServer]:
    # --slot-save-path: llama.cpp erases a slot's cache (loadgen --reset-cache) only with it; the baseline
    # server runs without, so a refused reset is exercised too
    save = tempfile.mkdtemp(prefix="loadgen-slots-")
    with LlamaServer(model=llama_model, binary=llama_binary, spec=True, cpu=llama_server_cpu,
                     extra_args=["--slot-save-path", save]) as srv:
        _LLAMA.append(srv)
        yield srv
    shutil.rmtree(save, ignore_errors=True)


@pytest.fixture(scope="session")
def llama_baseline(llama_baseline_server: LlamaServer) -> str:
    """Base URL (``http://127.0.0.1:PORT``) of the baseline llama-server."""
    return llama_baseline_server.url


@pytest.fixture(scope="session")
def llama_spec(llama_spec_server: LlamaServer) -> str:
    """Base URL of the llama-server with n-gram speculation (``--spec-type ngram-simple``)."""
    return llama_spec_server.url



# --------------------------------------------------------------------------- vLLM


@pytest.fixture(scope="session")
def vllm_server_cpu() -> int | None:
    """The core the vLLM servers are pinned to: the first, where the llama-servers have the last
    (``LOADGEN_E2E_VLLM_CPU`` picks another, ``-1`` disables pinning). The two groups run side by side on two
    workers: with all four servers on the last core, the host sat 43 % idle while both groups ran (vmstat)."""
    return _server_cpu("LOADGEN_E2E_VLLM_CPU", 0)


@pytest.fixture(scope="session")
def vllm_python(live) -> Path:
    """The vLLM venv's Python (installed on first use: about 2 min, tests/e2e/vllm.py)."""
    return ensure_vllm()


@pytest.fixture(scope="session")
def vllm_model(vllm_python: Path) -> Path:
    return ensure_vllm_model(vllm_python)


class VllmServers:
    """The suite's vLLM servers by role, for the whole session: each started on its first use, one at a time
    (a start is a minute of imports on every core and the server's whole memory, checked first:
    tests/e2e/memory.py), restarted if it was stopped, all stopped when the last test that uses them is done
    (``pytest_runtest_teardown`` below). Every such test runs on one xdist worker (tests/conftest.py), so there is
    never a second set. The K=4 server runs in dev mode: /reset_prefix_cache answers (loadgen --reset-cache); the
    others run without, so a refused reset is exercised too. The K=2 one ends killed mid-stage
    (tests/e2e/test_vllm.py, its last use)."""

    def __init__(self, python: Path, model: Path, cpu: int | None) -> None:
        cfg = dict(model=model, python=python, cpu=cpu)
        self.servers = {"baseline": VllmServer(**cfg, name="vllm-baseline"),
                        "spec": VllmServer(**cfg, name="vllm-ngram4", speculative=spec_config(), dev_mode=True),
                        "ngram2": VllmServer(**cfg, name="vllm-ngram2", speculative=spec_config(2))}

    def __getitem__(self, role: str) -> VllmServer:
        srv = self.servers[role]
        if not srv.alive():
            srv.stop()
            srv.start()
        return srv

    def stop(self) -> None:
        for srv in self.servers.values():
            srv.stop()


_POOLS: list[VllmServers] = []
_LLAMA: list[LlamaServer] = []  # the session's llama-servers


@pytest.fixture(scope="session")
def vllm_servers(vllm_python: Path, vllm_model: Path, vllm_server_cpu: int | None) -> Iterator[VllmServers]:
    pool = VllmServers(vllm_python, vllm_model, vllm_server_cpu)
    _POOLS.append(pool)
    try:
        yield pool
    finally:
        pool.stop()


def _uses(item: pytest.Item | None, fixture: str) -> bool:
    return item is not None and fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Servers go when the tests that use them are done, not at the session's end: the worker that held the
    llama-servers and the vLLM servers went on to other modules with 4 idle llama-servers (0.8 GB each) and
    three vLLM servers in memory. A later test that asks again gets them restarted."""
    unit, next_unit = scope_of(item.nodeid), nextitem and scope_of(nextitem.nodeid)
    if unit == "vllm" != next_unit:
        for pool in _POOLS:
            pool.stop()
    if unit == "llama" != next_unit:
        for srv in _LLAMA:
            srv.stop()


@pytest.fixture(scope="module")
def vllm_baseline_server(vllm_servers: VllmServers) -> VllmServer:
    return vllm_servers["baseline"]


@pytest.fixture(scope="module")
def vllm_spec_server(vllm_servers: VllmServers) -> VllmServer:
    return vllm_servers["spec"]


@pytest.fixture(scope="module")
def vllm_ngram2_server(vllm_servers: VllmServers) -> VllmServer:
    return vllm_servers["ngram2"]
