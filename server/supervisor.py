"""Runs SGLang in its own process group and takes it down cleanly.

NOTE: SGLang's main process spawns schedulers and a detokenizer; all of them
stay in the process group the supervisor creates (``start_new_session``), so
one ``killpg`` reaches every one. On Ctrl-C/SIGTERM the group gets SIGTERM,
then SIGKILL after ``shutdown_grace_s``; after any exit the group is killed
once more so no straggler outlives the supervisor.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from server.resolve import LaunchPlan
from server.sglang.launch.env import child_env

log = logging.getLogger("switchboard")


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def supervise(plan: LaunchPlan) -> int:
    """Run SGLang for ``plan`` until it exits or we are told to stop; return an exit code."""
    with tempfile.TemporaryDirectory(prefix="switchboard-run-") as run_dir:
        plan_path = Path(run_dir) / "plan.json"
        plan_path.write_text(plan.to_json())
        proc = subprocess.Popen(
            [sys.executable, "-m", "server.sglang.launch.main"],
            env=child_env(plan, plan_path),
            start_new_session=True,
        )
        stop_at: list[float] = []

        def on_signal(signum: int, _frame: object) -> None:
            if not stop_at:
                log.warning("%s received, stopping SGLang (grace %.0f s)",
                            signal.Signals(signum).name, plan.shutdown_grace_s)
                stop_at.append(time.monotonic() + plan.shutdown_grace_s)
                proc.send_signal(signal.SIGTERM)  # SGLang stops its own children

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while proc.poll() is None:
                if stop_at and time.monotonic() > stop_at[0]:
                    log.warning("SGLang did not exit in time; killing it")
                    _killpg(proc.pid, signal.SIGKILL)
                try:
                    proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            _killpg(proc.pid, signal.SIGKILL)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0 if stop_at else proc.returncode
