"""Run the simulator as a child process: ``with SimProcess(...) as sim: use(sim.url)``.

Used by tests, ``loadgen run`` and the Locust scenario; keep the signature stable.
The child is ``python -m loadgen sim ... --port 0``; we read its first stdout
line to learn the port, and always stop it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

from loadgen.errors import LoadgenError
from loadgen.sim.prom import METRICS_FLAVOURS

_PR_SET_PDEATHSIG = 1


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)

_LISTENING = re.compile(r"^loadgen sim: listening on (http://\S+)$")


class SimProcess:
    def __init__(
        self,
        profile: str = "pcie-8gpu-eagle3",
        mode: str = "baseline",
        time_scale: float = 1.0,
        seed: int = 0,
        extra_args: Sequence[str] = (),
        cpu: int | None = None,
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        stream_shape: str = "step",
        metrics_flavour: str = METRICS_FLAVOURS[0],
        faults: str | None = None,
        prefix_cache: int = 0,
    ) -> None:
        """``stream_shape``: "step" (SGLang's one event per step) or "burst" (llama.cpp's one event per
        token, a step's tokens written back to back); ``metrics_flavour``: one of METRICS_FLAVOURS (sim/prom.py), whose
        names /metrics exports; ``faults``: a ``--faults`` spec (loadgen.sim.faults); ``prefix_cache``: tokens of
        prefix cache (``--prefix-cache``, 0: the profile's, none in the built-in ones); see docs/simulator.md."""
        self.argv = [
            sys.executable, "-m", "loadgen", "sim",
            "--profile", str(profile), "--mode", mode, "--host", host, "--port", "0",
            "--time-scale", repr(float(time_scale)), "--seed", str(seed), *map(str, extra_args),
        ]  # fmt: skip
        if stream_shape != "step":
            self.argv += ["--stream-shape", stream_shape]
        if metrics_flavour != METRICS_FLAVOURS[0]:
            self.argv += ["--metrics-flavour", metrics_flavour]
        if faults:
            from loadgen.sim.faults import parse

            parse(faults)  # a bad spec is a one-line error here, not a child that exits
            self.argv += ["--faults", faults]
        if prefix_cache:
            self.argv += ["--prefix-cache", str(int(prefix_cache))]
        self.cpu = cpu
        self.startup_timeout = startup_timeout
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self._stderr: deque[str] = deque(maxlen=40)
        self._threads: list[threading.Thread] = []

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _preexec(self) -> None:
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})
        if self._die_with_parent:
            # Linux's PR_SET_PDEATHSIG: the simulator gets SIGTERM when loadgen dies, even by SIGKILL (a Locust
            # master killed so left both its simulators running, parented to init)
            _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    def start(self) -> SimProcess:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # the death signal follows the thread that forked, not the process: only from the main thread (a
        # thread that started one and ended would take the simulator with it)
        self._die_with_parent = sys.platform == "linux" and threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=self._preexec if self.cpu is not None or self._die_with_parent else None,
        )
        lines: deque[str] = deque()
        got = threading.Event()

        def read_stdout() -> None:
            for line in self.proc.stdout:  # keep draining so the child never blocks on a full pipe
                if not got.is_set():
                    lines.append(line.rstrip("\n"))
                    got.set()

        def read_stderr() -> None:
            for line in self.proc.stderr:
                self._stderr.append(line.rstrip("\n"))

        for fn in (read_stdout, read_stderr):
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            self._threads.append(t)
        deadline = time.monotonic() + self.startup_timeout
        while not got.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                break
        if got.is_set():
            m = _LISTENING.match(lines[0])
            if m:
                self.url = m.group(1)
                return self
        why = "exited" if self.proc.poll() is not None else f"did not listen within {self.startup_timeout:g} s"
        self.stop()
        tail = " | ".join(list(self._stderr)[-5:]) or "(no stderr)"
        raise LoadgenError(f"simulator {why}: {' '.join(self.argv[3:])}: {tail}")

    def stop(self) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for t in self._threads:
            t.join(timeout=1)

    @property
    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
