"""Starting and stopping the servers under test, for users with one GPU box.

A target may name the command that starts its server, a health URL and the
signal that stops it. The ramp starts one server, waits until it is healthy,
runs its stages, stops it and starts the next, and records what each server
said about itself. A server that never becomes healthy, or whose command
exits, is a one-line error with the tail of its log. One that exits during a
stage is started again (loadgen/run/ramp.py: a few attempts, with backoff) and
the stage run once more.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loadgen import redact
from loadgen.errors import LoadgenError

ANNOUNCE_AFTER_S = 1.0
"""A start that has neither ended nor answered after this long is said to be waited for (ManagedServer.start)."""


@dataclass
class ServerCommand:
    label: str
    command: str | list[str]
    health_url: str
    stop_signal: str = "SIGINT"
    startup_timeout_s: float = 900.0
    env: dict = field(default_factory=dict)
    log_path: Path | None = None

    def argv(self) -> list[str]:
        """The command as the argument list it runs as; one line naming the configuration if it does not parse
        (an unclosed quote) or is empty."""
        try:
            argv = shlex.split(self.command) if isinstance(self.command, str) else list(self.command)
        except ValueError as exc:
            raise LoadgenError(f"the start command of {self.label}: {exc} ({redact.text(str(self.command))!r})") \
                from None
        if not argv:
            raise LoadgenError(f"the start command of {self.label} is empty")
        return argv


class ManagedServer:
    def __init__(self, cmd: ServerCommand) -> None:
        self.cmd = cmd
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited(self) -> int | None:
        """The exit status of a started server that has ended on its own; None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def start(self, announce: Callable[[], None] | None = None, grace_s: float = ANNOUNCE_AFTER_S) -> None:
        """Run the command and wait until its health URL answers 2xx. ``announce``: called once the command has
        run ``grace_s`` without exiting or answering (what a long start says while it waits); a command that exits
        at once is then one line, the error's."""
        argv = self.cmd.argv()
        log_path = self.cmd.log_path or Path(f"{self.cmd.label}.server.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **self.cmd.env}, start_new_session=True)
        except OSError as exc:
            raise LoadgenError(f"target {self.cmd.label}: cannot run {argv[0]!r}: {exc.strerror}") from None
        t0 = time.monotonic()
        deadline = t0 + self.cmd.startup_timeout_s
        while True:
            if announce is not None and time.monotonic() - t0 >= grace_s:
                announce()
                announce = None
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise LoadgenError(f"target {self.cmd.label}: start command exited with status {code} before "
                                   f"{self.cmd.health_url} was healthy; log tail: {self.log_tail()}")
            if _healthy(self.cmd.health_url):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise LoadgenError(f"target {self.cmd.label}: {self.cmd.health_url} not healthy after "
                                   f"{self.cmd.startup_timeout_s:g} s; log tail: {self.log_tail()}")
            time.sleep(0.5)

    def stop(self, grace_s: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            # the command ended on its own (a server that died): what it started may still hold the port
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc is not None and self.proc.poll() is None:
            sig = getattr(signal, self.cmd.stop_signal, signal.SIGINT)
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 5) -> str:
        path = self.cmd.log_path or Path(f"{self.cmd.label}.server.log")
        try:
            text = path.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return "(no log)"
        return " | ".join(t.strip() for t in text) or "(empty log)"

    def __enter__(self) -> "ManagedServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
