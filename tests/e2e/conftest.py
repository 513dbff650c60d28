"""Session fixtures for the end-to-end suite: a baseline and an n-gram speculative llama-server, and real vLLM
servers (tests/e2e/vllm.py): a baseline and two n-gram sizes.

The first run on a machine builds llama-server (15-20 min on 2 cores) and assembles the
model into ``$LOADGEN_CACHE`` (default ``~/.cache/loadgen``); later runs reuse the cache
and a server starts in about a second. ``LOADGEN_SKIP_E2E=1`` skips the suite.

On a machine with more than one core the llama-servers are pinned to the last core
(``LOADGEN_E2E_SERVER_CPU`` picks another, ``-1`` disables pinning) and the vLLM servers to the
first (``LOADGEN_E2E_VLLM_CPU``), so each group's load client, left on the other cores, does not
compete with its servers for the CPU.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

from .llama import LlamaServer, binary_version, live_servers, ensure_llama_server, ensure_model, server_binary_path
from .vllm import VllmServer, ensure_vllm, ensure_vllm_model, spec_config

# Timeout for a test that may have to build llama-server first (pyproject's default is
# 600 s; the build alone takes 7-20 min on 2 cores).
BUILD_TIMEOUT_S = 3000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs the servers ``e2e``, and, only while llama-server is not
    built yet on this machine, give those tests room for the build."""
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
        yield srv


@pytest.fixture(scope="session")
def llama_spec_server(llama_binary: Path, llama_model: Path,
                      llama_server_cpu: int | None) -> Iterator[LlamaServer]:
    # --slot-save-path: llama.cpp erases a slot's cache (loadgen --reset-cache) only with it; the baseline
    # server runs without, so a refused reset is exercised too
    save = tempfile.mkdtemp(prefix="loadgen-slots-")
    with LlamaServer(model=llama_model, binary=llama_binary, spec=True, cpu=llama_server_cpu,
                     extra_args=["--slot-save-path", save]) as srv:
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


def _start_side_by_side(servers: list[VllmServer]) -> None:
    """Start every server at once: each start is a minute or two of Python imports on every core; serving,
    each is pinned to the servers' core. The first failure is raised here, in the test's thread."""
    errors: list[BaseException] = []

    def start(srv: VllmServer) -> None:
        try:
            srv.start()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=start, args=(srv,)) for srv in servers[1:]]
    for t in threads:
        t.start()
    try:
        start(servers[0])
    finally:
        for t in threads:
            t.join()
    if errors:
        for srv in servers:
            srv.stop()
        raise errors[0]


@pytest.fixture(scope="session")
def vllm_servers(vllm_python: Path, vllm_model: Path, vllm_server_cpu: int | None) -> Iterator[dict[str, VllmServer]]:
    """The baseline, the n-gram K=4 and the n-gram K=2 server, started side by side (three at once: 3 x 5.75 GB;
    one after another the K=2 one cost the group a start of its own, 60-140 s). The K=4 one runs in dev mode:
    /reset_prefix_cache answers (loadgen --reset-cache); the others run without, so a refused reset is
    exercised too. The K=2 one ends killed mid-stage (tests/e2e/test_vllm.py, its last use)."""
    cfg = dict(model=vllm_model, python=vllm_python, cpu=vllm_server_cpu)
    servers = {"baseline": VllmServer(**cfg, name="vllm-baseline"),
               "spec": VllmServer(**cfg, name="vllm-ngram4", speculative=spec_config(), dev_mode=True),
               "ngram2": VllmServer(**cfg, name="vllm-ngram2", speculative=spec_config(2))}
    _start_side_by_side(list(servers.values()))
    try:
        yield servers
    finally:
        for srv in servers.values():
            srv.stop()


@pytest.fixture(scope="session")
def vllm_baseline_server(vllm_servers: dict[str, VllmServer]) -> VllmServer:
    return vllm_servers["baseline"]


@pytest.fixture(scope="session")
def vllm_spec_server(vllm_servers: dict[str, VllmServer]) -> VllmServer:
    return vllm_servers["spec"]


@pytest.fixture(scope="session")
def vllm_ngram2_server(vllm_servers: dict[str, VllmServer]) -> VllmServer:
    return vllm_servers["ngram2"]
