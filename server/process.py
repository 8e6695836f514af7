"""One supervised child: its own process group, stopped with SIGTERM then SIGKILL.

NOTE: a child starts its own session (``start_new_session``), so everything it
spawns (SGLang's schedulers and detokenizer) stays in its process group and one
``killpg`` reaches all of it. After any exit the group is killed once more so
no straggler outlives the supervisor.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

log = logging.getLogger("switchboard")

PR_SET_PDEATHSIG = 1


def killpg(pgid: int, sig: signal.Signals) -> None:
    """Signal a process group that may already be gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Child:
    """A named child process in its own process group."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None,
                 cpus: Sequence[int] = ()) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = env
        self.cpus = tuple(cpus)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cpus = self.cpus

        def prepare() -> None:  # runs in the child before exec
            # NOTE: SIGTERM when the supervisor dies, however it dies: no orphans.
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if cpus:
                os.sched_setaffinity(0, cpus)  # inherited by everything it spawns

        self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True, preexec_fn=prepare)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def poll(self) -> int | None:
        """Exit status, or ``None`` while it runs (or was never started)."""
        return None if self.proc is None else self.proc.poll()

    def terminate(self) -> None:
        """SIGTERM to the leader (SGLang and SMG stop their own children)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the whole group, leader gone or not."""
        if self.proc is not None:
            killpg(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("%s (pid %d) did not die after SIGKILL", self.name, self.proc.pid)


def healthy(url: str, path: str = "/health", timeout: float = 2.0) -> bool:
    """``GET url+path`` answers 200."""
    try:
        with urllib.request.urlopen(url + path, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class StopSignal:
    """Turns the first Ctrl-C/SIGTERM into a deadline; restores handlers on exit."""

    def __init__(self, grace_s: float, on_stop: Callable[[], None]) -> None:
        self.grace_s = grace_s
        self.on_stop = on_stop
        self.deadline: float | None = None
        # What `signal.signal` returns and takes back: a handler, SIG_DFL/SIG_IGN, or None.
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.deadline is None:
            log.warning("%s received, stopping (grace %.0f s)", signal.Signals(signum).name, self.grace_s)
            self.request()

    def request(self) -> None:
        """Start stopping now (idempotent): ``on_stop`` once, then the grace runs."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.grace_s
            self.on_stop()

    @property
    def stopping(self) -> bool:
        return self.deadline is not None

    def overdue(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline
