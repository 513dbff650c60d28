"""The suite's two tiers, chosen by what a test uses, and where the time went.

* **fast** (``bash tests/run.sh --fast``): no process and no wall-clock window — analysis, reports
  on synthetic runs, stages from given records, workloads, parsing, settings, layout. A loopback
  server inside the test process that answers at once is allowed.
* **live**: every test that requests the :func:`live` fixture, directly or through another fixture
  (a simulator, a llama-server, the CLI or Locust in a child process). Such a test is marked
  ``live`` at collection; nobody marks one by hand.

A test outside the live tier that starts a process fails at once, naming the fixture it should
request: that keeps the fast tier fast and honest as tests are added.

Under pytest-xdist (tests/run.sh) a module's tests stay on one worker, so a module-scoped run or server
is made once; the tests against the llama-servers run on one worker, those against the vLLM servers on one
(tests/e2e/scopes.py). At the end the summary prints each tier's test time and the slowest tests.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import shutil
import subprocess
import threading
import time
from collections import defaultdict

import pytest

from tests.e2e.memory import meminfo
from tests.e2e.scopes import scope_of

LIVE = "live"


@pytest.fixture(scope="session")
def live() -> None:
    """Requested by every test (or fixture) that starts a process or waits on a wall-clock window."""


@pytest.fixture(scope="session")
def chromium(live) -> str:
    """Headless Chromium's path; a test that needs it fails in one line where it is missing (tests/run.sh
    installs Debian's package)."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    pytest.fail("chromium is not installed: `apt-get install chromium` (tests/run.sh does it as root)",
                pytrace=False)


FAVOURED_NICE = -10
"""About nine times the CPU share of a nice-0 task when they share a core (CFS weights 9548 : 1024)."""


@pytest.fixture
def favoured(live) -> None:
    """This test's thread and every process it starts run ahead of the host's other work (nice -10, where
    allowed: root, as CI runs), for a test whose claim is that the client or the simulator kept up — a
    client-bound flag that must not fire, a running batch that must be C. On a saturated host that claim
    would be false, not wrongly judged: the client's loop was held 350 ms beside four other test workers,
    and a vLLM-flavoured stage at C=30 ran a median batch of 26, both rightly flagged."""
    with _favoured():
        yield


@pytest.fixture(scope="module")
def favoured_module(live) -> None:
    """``favoured`` for a module's shared run (a module-scoped fixture that makes it requests this)."""
    with _favoured():
        yield


@contextlib.contextmanager
def _favoured():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    favour(0)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def favour(pid: int) -> None:
    """Put a process (0: this thread) ahead of the host's other work, where allowed (see `favoured`)."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, FAVOURED_NICE)
    except PermissionError:
        pass


class LiveTestError(RuntimeError):
    pass


def _refuse(what: str, nodeid: str):
    def refused(*a, **kw):
        raise LiveTestError(f"{nodeid} {what} but does not request the `live` fixture (tests/conftest.py): "
                            "request it, or a fixture that does, so the test runs in the live tier")
    return refused


@contextlib.contextmanager
def _no_process(item: pytest.Item):
    """Around each phase of a test outside the live tier, fixtures of every scope included (a module's
    fixture is set up inside its first test's setup)."""
    if LIVE in item.fixturenames:
        yield
        return
    patch = pytest.MonkeyPatch()
    node = item.nodeid
    patch.setattr(subprocess.Popen, "_execute_child", _refuse("starts a process", node))
    patch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("starts a process", node))
    patch.setattr(os, "fork", _refuse("forks", node))
    patch.setattr(os, "posix_spawn", _refuse("starts a process", node))
    try:
        yield
    finally:
        patch.undo()


class MemoryPeak:
    """The machine's memory in use (MemTotal - MemAvailable) sampled every half second in a thread of the
    controlling process, for the summary: the suite's peak is what decides whether it fits a machine (a run
    that reached 23.9 of 24.1 GB lost a vLLM worker to the OOM killer)."""

    def __init__(self) -> None:
        self.start = self.peak = self.used()
        self.peak_at = 0.0
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-peak", daemon=True)
        self._thread.start()

    @staticmethod
    def used() -> int:
        return meminfo("MemTotal") - meminfo("MemAvailable")

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            if (u := self.used()) > self.peak:
                self.peak, self.peak_at = u, time.monotonic() - self.t0

    def line(self) -> str:
        self._stop.set()
        total = meminfo("MemTotal")
        return (f"memory: peak {self.peak / 1e9:.1f} of {total / 1e9:.1f} GB in use, at {self.peak_at / 60:.1f} min "
                f"({self.start / 1e9:.1f} GB in use when the suite started)")


_memory: MemoryPeak | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _memory
    if not hasattr(session.config, "workerinput"):
        _memory = MemoryPeak()
    _matplotlib_cache()


def _matplotlib_cache() -> None:
    """matplotlib's first import on a machine lists its fonts with fc-list (a process) to build its cache
    (~/.cache/matplotlib): done here, before any test, so a fast-tier report test on a fresh machine draws
    its PNG charts instead of failing as a test that starts a process (22 did, on a new host)."""
    with contextlib.suppress(ImportError):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.font_manager  # noqa: F401


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _no_process(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _no_process(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    with _no_process(item):
        return (yield)


_SERVERS = {"llama_binary": "llama", "vllm_python": "vllm"}


SERVER_UNITS = ("llama", "vllm")


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadscope`` (tests/run.sh) with :func:`scope_of` for its units, in collection order (the two
    server units first). xdist's own ``loadgroup`` reads groups it writes into each test's node id, which
    pytest 9.2 (what a fresh venv installs) no longer lets it change: no test had a group, both workers took
    llama and vLLM tests and each started its own servers (six vLLM servers, 23 of 24 GB in use).

    With three workers or more the last is a reserve: it takes no work while a server unit is queued or
    running, then joins. On 2 cores the real servers left the CPU 8 % idle for their first 5-7 minutes, and the
    simulator tests after them left it 60 % idle with two workers (most of a live test waits on a window)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ServerScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _held(self, node) -> bool:
            nodes = self.nodes
            if self.numnodes < 3 or not nodes or node is not nodes[-1]:
                return False
            busy = set(self.workqueue) | {scope for unit in self.assigned_work.values() for scope, tests in
                                          unit.items() if not all(tests.values())}
            return bool(busy & set(SERVER_UNITS))

        def _assign_work_unit(self, node) -> None:
            if not self._held(node):
                super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if not self._held(node):
                super()._reschedule(node)

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            reserve = self.nodes[-1]
            if reserve is not node and not self._pending_of(self.assigned_work[reserve]):
                self._reschedule(reserve)  # the last server test is done: the reserve joins

    config.option.loadscopereorder = False
    return ServerScopes(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    if LIVE in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.live)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, scope in _SERVERS.items():
            if fixture in getattr(item, "fixturenames", ()) and scope_of(item.nodeid) != scope:
                raise pytest.UsageError(f"{item.nodeid} uses {fixture} but is not in tests/e2e "
                                        f"({'test_vllm*.py' if scope == 'vllm' else 'not test_vllm*.py'}), where "
                                        f"one worker runs every {scope} test (tests/e2e/scopes.py)")
    # the longest units first, so neither is the one left running alone at the end
    items.sort(key=lambda it: SERVER_UNITS.index(scope_of(it.nodeid)) if scope_of(it.nodeid) in SERVER_UNITS else 2)


# --------------------------------------------------------------------------- where the time went

_times: dict[str, float] = defaultdict(float)
_counts: dict[str, int] = defaultdict(int)
_slowest: list[tuple[float, str]] = []
_started = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = LIVE if LIVE in report.keywords else "fast"
    _times[tier] += report.duration
    if report.when == "call":
        _counts[tier] += 1
    _slowest.append((report.duration, f"{report.when:8s} {report.nodeid}"))
    if len(_slowest) > 200:
        _slowest.sort(reverse=True)
        del _slowest[20:]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # a worker: the controller prints
    tr = terminalreporter
    tr.section("where the time went")
    wall = time.monotonic() - _started
    for tier in ("fast", LIVE):
        if _counts[tier]:
            tr.write_line(f"tier {tier:5s}: {_counts[tier]:4d} tests, {_times[tier]:7.1f} s of test time")
    tr.write_line(f"wall: {wall:.1f} s ({wall / 60:.1f} min)")
    if _memory is not None:
        tr.write_line(_memory.line())
    _slowest.sort(reverse=True)
    tr.write_line("slowest (setup/call/teardown):")
    for d, name in _slowest[:15]:
        tr.write_line(f"  {d:7.1f} s  {name}")
