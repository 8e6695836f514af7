"""Start and stop ``python -m server`` the way a user does, for harnesses and tests."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]
#: Includes the one-time model conversion on a fresh machine.
START_TIMEOUT_S = 900


#: Consecutive ports a started server may use: its own, then a unit's workers.
PORT_SPAN = 8
#: A unit's gateway also binds its Prometheus port at ``server.port`` + this
#: (``server.cluster.gateway.PROMETHEUS_OFFSET``; tests/config/test_cluster.py keeps them equal).
GATEWAY_METRICS_OFFSET = 1000
#: ``settled_log_since``'s marker: a prompt length no test's own batch has.
MARKER_TOKENS = 13
MARKER_TOKEN = 11


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(span: int = 1, extra: tuple[int, ...] = ()) -> int:
    """A port ``p`` where ``p .. p+span-1`` and ``p + e`` for each offset ``e`` of
    ``extra`` are all free now.

    NOTE: all drawn below the kernel's ephemeral range, so no other process's
    ``bind(0)``/``connect`` is handed one of them between this check and the
    caller's own bind (a unit's workers bind ``port+1..``: a port the kernel
    picked leaves those to chance, which is how a supervisor test once lost
    its worker port to a neighbouring live server, and a gateway its metrics
    port at ``port+1000`` to a client connection).
    """
    low = _ephemeral_low()
    top = max(span, *extra) if extra else span
    draw = random.SystemRandom()
    for _ in range(200):
        first = draw.randrange(10_000, max(10_001, low - top))
        if all(_bindable(p) for p in [*range(first, first + span), *(first + e for e in extra)]):
            return first
    raise RuntimeError(f"no {span} consecutive free ports (and offsets {extra}) below {low}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with its log tail."""


class ServerProcess:
    """``python -m server <overrides>`` on a free port, with its log in ``log_path``."""

    def __init__(self, overrides: list[str], log_path: Path) -> None:
        self.port = free_port(PORT_SPAN, extra=(GATEWAY_METRICS_OFFSET,))
        self.overrides = [f"server.port={self.port}", *overrides]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment that start the server."""
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONUNBUFFERED="1")
        return [sys.executable, "-m", "server", *self.overrides], env

    def start(self, timeout: float = START_TIMEOUT_S) -> ServerProcess:
        argv, env = self.command()
        self._log = self.log_path.open("w")
        # NOTE: its own session, so its own CPU autogroup (Linux schedules sessions fairly against
        # each other): Switchboard's supervisor starts SGLang in a new session, stock SGLang's
        # launcher does not. Sharing the caller's session, stock SGLang got ~40% of a core under
        # a busy machine where ours got a full one (7-24 vs 52 tok/s on the same bursts).
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)  # NOTE: a test waits for this start: a second between looks cost ~0.5 s each
        self.stop()
        raise ServerStartError(f"server not healthy after {timeout:.0f}s:\n{self.log_tail()}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def settled_log_since(self, offset: int, timeout: float = 60) -> str:
        """The log after character ``offset``, once every batch already answered has logged.

        NOTE: SGLang streams a prefill batch's answers before it logs the batch
        (``process_batch_result_prefill``: ``stream_output``, then
        ``report_prefill_stats``), so a client that reads the log the moment its
        answer arrives can miss that line; on a loaded machine it did (CI, stop
        51). A marker request of ``MARKER_TOKENS`` tokens is scheduled after
        every earlier batch has been processed and logged, in the same
        scheduler loop; once the marker's own line is in the log, everything
        before it is too. The marker's line and what follows are cut off. For a
        caller with no request of its own in flight (the marker must be a batch
        of one).
        """
        marker = re.compile(r"Prefill batch[^\n]*#new-seq: 1, #new-token: (\d+), #cached-token: (\d+)")
        r = httpx.post(self.base_url + "/generate", timeout=timeout, json={
            "input_ids": [MARKER_TOKEN] * MARKER_TOKENS, "sampling_params": {"max_new_tokens": 1}})
        r.raise_for_status()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()[offset:]
            for m in marker.finditer(text):
                if int(m[1]) + int(m[2]) == MARKER_TOKENS:
                    return text[:text.rfind("\n", 0, m.start()) + 1]
            time.sleep(0.05)
        raise TimeoutError(f"the marker's prefill batch never appeared in {self.log_path}")

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def descendants(self) -> list[psutil.Process]:
        assert self.proc is not None
        try:
            children: list[psutil.Process] = psutil.Process(self.proc.pid).children(recursive=True)
            return children
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> float:
        """Signal the supervisor; return seconds until it exited (killed after ``timeout``)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return 0.0
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in [*self.descendants(), psutil.Process(self.proc.pid)]:
                p.kill()
            self.proc.wait()
        self._log.close()
        return time.monotonic() - t0

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
