"""The gateway process: ``python -m server.cluster.smg_main <smg launch flags>``.

SMG (pinned) takes its API key and per-tenant keys only as command-line flags
(``--api-key``, ``--tenant-api-key``), which every local user could read in the
process list. This wrapper parses the flags with SMG's own parser, sets the
keys the supervisor put in its environment (``server.auth``) on SMG's
``RouterArgs``, and runs SMG's own ``launch_router``, exactly what
``smg launch`` does otherwise.
"""

from __future__ import annotations

import sys

from server.auth import take_keys


def main(argv: list[str]) -> None:
    """Start SMG with ``argv`` and the keys of this process's environment."""
    keys = take_keys()
    from smg.launch_router import launch_router, parse_router_args

    router_args = parse_router_args(argv)
    if keys.api_key:
        # NOTE: SMG checks clients' bearer tokens against it and sends it to the workers.
        router_args.api_key = str(keys.api_key)
    if keys.tenant_keys:
        router_args.tenant_api_keys = [(tenant, str(key)) for tenant, key in keys.tenant_keys]
    launch_router(router_args)


if __name__ == "__main__":
    main(sys.argv[1:])
