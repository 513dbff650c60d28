"""The suite's slow set-up, done before pytest starts (tests/run.sh): ``python -m tests.e2e.setup``.

Builds llama-server, assembles the GGUF, installs vLLM and converts the model into ``$LOADGEN_CACHE``
(tests/e2e/llama.py, tests/e2e/vllm.py), saying what it does, how far it is every minute and how long each
step took. Cold on 2 cores the llama.cpp build is the long pole (733 s measured); vLLM's install is mostly
download and unpacking, so it runs beside the build, and the model conversion after both the GGUF and the
venv exist. Cached, the whole set-up is a few checks (under a second).

Any failure ends it with one line naming the step and its log (exit 1): the suite does not start. A machine
with too little memory for the real servers (tests/e2e/memory.py) is one line too; the set-up still
succeeds, so the rest of the suite runs, and pytest then fails the run, saying why (tests/e2e/conftest.py).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .llama import BuildError, _run_step, cache_root, ensure_llama_server, ensure_model, server_root
from .memory import real_servers_refused
from .vllm import ensure_vllm, ensure_vllm_model, vllm_root

HEARTBEAT_S = 60.0


@dataclass
class Step:
    name: str
    run: Callable[[], object]
    progress: Callable[[], str] = lambda: ""
    after: list["Step"] = field(default_factory=list)
    started: float | None = None
    seconds: float | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __call__(self) -> None:
        try:
            for dep in self.after:
                dep.done.wait()
                if dep.error:
                    self.error = f"not run: {dep.name} failed"
                    return
            self.started = time.monotonic()
            self.run()
            self.seconds = time.monotonic() - self.started
            say(f"{self.name}: {'cached' if self.seconds < 1 else f'done in {self.seconds:.0f} s'}")
        except (BuildError, OSError) as e:
            self.error = str(e).splitlines()[0]
        finally:
            self.done.set()


def say(line: str) -> None:
    print(f"setup: {line}", flush=True)


def _build_progress() -> str:
    """The llama.cpp build's last ``[ NN%]`` line from its log, else the step it is at."""
    log = server_root() / "build.log"
    try:
        text = log.read_bytes()[-4096:].decode("utf-8", "replace")
    except OSError:
        return ""
    found = re.findall(r"\[\s*(\d+)%\]", text)
    return f"{found[-1]} % compiled" if found else _last_step(log)


def _last_step(log: Path) -> str:
    try:
        steps = re.findall(r"===== step (\S+?):", log.read_text(errors="replace"))
    except OSError:
        return ""
    return f"step {steps[-1]}" if steps else ""


def ensure_chromium() -> None:
    """Debian's chromium for the web UI and HTML report tests, installed as root where it is missing (elsewhere
    those tests fail saying how to install it: tests/conftest.py)."""
    if any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        say("chromium is missing and this is not root: the browser tests will fail saying so")
        return
    log = cache_root() / "chromium-install.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run_step("apt-get update", ["apt-get", "update", "-qq"], log, timeout=900, what="chromium install", env=env)
    _run_step("apt-get install", ["apt-get", "install", "-y", "-qq", "chromium"], log, timeout=1800,
              what="chromium install", env=env)


def main() -> int:
    t0 = time.monotonic()
    say(f"llama-server, the model, vLLM and chromium, into {cache_root()} where missing "
        "(cold on 2 cores: 7-8 min, the llama.cpp build the long pole)")
    steps = [Step("chromium", ensure_chromium)]
    if refused := real_servers_refused():
        say(f"{refused}: the real-server tests will not run and the suite will fail")
    else:
        steps += _server_steps()
    threads = [threading.Thread(target=s, name=s.name, daemon=True) for s in steps]
    for t in threads:
        t.start()
    while not all(s.done.is_set() for s in steps):
        for _ in range(int(HEARTBEAT_S)):
            if all(s.done.is_set() for s in steps):
                break
            time.sleep(1.0)
        else:
            running = [s for s in steps if s.started is not None and not s.done.is_set()]
            say("; ".join(f"{s.name} {time.monotonic() - s.started:.0f} s" + (f" ({p})" if (p := s.progress()) else "")
                          for s in running))
    failed = [s for s in steps if s.error]
    for s in failed:
        say(f"{s.name} failed: {s.error}")
    if failed:
        return 1
    say(f"ready in {time.monotonic() - t0:.0f} s")
    return 0


def _server_steps() -> list[Step]:
    llama = Step("llama-server build", ensure_llama_server, _build_progress)
    gguf = Step("Gemma 3 270M GGUF", ensure_model)
    venv = Step("vLLM install", ensure_vllm, lambda: _last_step(vllm_root() / "install.log"))
    convert = Step("vLLM model conversion", lambda: ensure_vllm_model(ensure_vllm()), after=[gguf, venv])
    return [llama, gguf, venv, convert]


if __name__ == "__main__":
    sys.exit(main())
