"""The SGLang main process: ``python -m server.sglang.launch.main`` (started by the supervisor).

Reads the plan named by ``$SWITCHBOARD_PLAN``, checks the hook contract,
builds ``ServerArgs`` with SGLang's own parser, loads plugins (ours installs
the policies), adds the overload middleware and runs SGLang's HTTP server.

Exit codes: 2 = config error, 3 = SGLang hook contract broken.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from compose.config import ConfigError
from server.auth import Keys, take_keys
from server.resolve import LaunchPlan
from server.sglang.launch.env import PLAN_ENV

EXIT_CONFIG = 2
EXIT_CONTRACT = 3


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the supervisor dies, so nothing is orphaned."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def prepare(plan: LaunchPlan, keys: Keys) -> Any:  # SGLang's ServerArgs (untyped)
    """Everything before serving: contract, ServerArgs (with ``keys``), plugins, middleware."""
    from server.sglang.launch.contract import verify

    verify()
    from server.sglang.launch.args import build_server_args

    server_args, argv = build_server_args(plan)
    logging.getLogger("switchboard").info("sglang args: %s", " ".join(argv))
    # NOTE: set on ServerArgs, never in argv (SGLang keeps argv as its launch command
    # and logs it); SGLang resolves its fields later, in launch_server, and its
    # auth middleware reads them there. ``Secret`` prints as <redacted> in its log.
    server_args.api_key = keys.api_key
    server_args.admin_api_key = keys.admin_api_key

    from sglang.srt.plugins import load_plugins

    from server.sglang.launch.input_guard import install_input_guard

    # NOTE: here, not in the plugin: the tokenizer manager runs in this (the HTTP)
    # process only; load_plugins applies every registered hook.
    install_input_guard()
    load_plugins()
    _check_installed()

    from sglang.srt.entrypoints.http_server import app

    from server.sglang.middleware.bad_input import BadInputMiddleware
    from server.sglang.middleware.redact import RedactKeysMiddleware
    from server.sglang.middleware.retry_after import RetryAfterMiddleware
    from server.sglang.middleware.sessions import SessionIdMiddleware

    app.add_middleware(RetryAfterMiddleware)
    app.add_middleware(SessionIdMiddleware)
    app.add_middleware(RedactKeysMiddleware, keys=keys)
    # NOTE: added last, so outermost of ours: it sees a validation crash whichever layer it passed.
    app.add_middleware(BadInputMiddleware)
    return server_args


def _check_installed() -> None:
    """Fail unless our plugin's hooks were applied in this process."""
    from sglang.srt.managers import scheduler

    from server.sglang.launch.contract import HookContractError

    if scheduler.Scheduler.__name__ != "SwitchboardScheduler":
        raise HookContractError(
            "SGLang did not apply Switchboard's Scheduler hook (is the `switchboard` "
            "plugin excluded by SGLANG_PLUGINS, or the package not installed?)"
        )


def main() -> int:
    _die_with_parent()
    keys = take_keys()  # NOTE: first: SGLang's own processes must not inherit them
    plan = LaunchPlan.from_json(Path(os.environ[PLAN_ENV]).read_text())
    from server.sglang.launch.contract import HookContractError

    try:
        server_args = prepare(plan, keys)
    except ConfigError as exc:
        print(f"switchboard: config error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except HookContractError as exc:
        print(f"switchboard: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONTRACT
    from sglang.srt.entrypoints.http_server import launch_server

    launch_server(server_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
