"""``python -m bench.live.peer_driver '<JSON list of argument lists>'``: bench_serving, run after run.

Each run is SGLang's own ``python -m sglang.bench_serving`` command-line entry
(``cli_main``) with exactly one argument list, in order, in this one interpreter
(``bench.live.peer.bench_serving_runs``). A run that fails stops the rest.
"""

from __future__ import annotations

import json
import sys
import warnings


def main(argvs: list[list[str]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # NOTE: the module's deprecated alias, as users type it
        from sglang.bench_serving import cli_main
    for argv in argvs:
        sys.argv = ["sglang.bench_serving", *argv]
        cli_main()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
