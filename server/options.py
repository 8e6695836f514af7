"""``python -m server.options``: the README's options table, with the SGLang flags each option forces.

    python -m server.options                             # the README's table
    python -m server.options --controls +cache=penelope  # stock's overrides under the same flags

The table is ``compose.help.options_table`` (what each option does, from
``conf/``) with one note per kind's option: the ``sglang.*`` flags its server
binding forces on CPU (``ForcedFlag``), composed as ``python -m server
+<group>=<option> server.device=cpu`` would compose it. A flag marked
*stock runs it too* changes how stock SGLang serves (the overlap scheduler,
the page size, a backend): a live comparison runs stock with it as the control
row. ``tests/config/test_help.py`` holds the README equal to this output and
``tests/config/test_forced_flags.py`` holds every field an option sets to
its listed flags.

NOTE: imports no SGLang: bindings state flags as data (``launch``), and
importing a binding module is light.
"""

from __future__ import annotations

import argparse

from compose.config import CONFIG_NAME, ConfigError, compose
from compose.help import options_table, reader_may_leave
from server.resolve import resolve
from server.sglang.launch.args import controls, forced_flags

#: The device the table's flags are stated for (this project's CI and laptops).
DEVICE = "cpu"


def _value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def forced_note(group: str, option: str) -> str:
    """The README's note for ``+group=option``: the flags it forces on CPU, or why none can be stated."""
    try:
        forced = forced_flags(resolve(compose([f"+{group}={option}", f"server.device={DEVICE}"])))
    except ConfigError as exc:
        return f"Forces on CPU: not stated here (composed alone it is refused: {exc})."
    if not forced:
        return ""
    flags = [f"`sglang.{f.flag.field}={_value(f.flag.value)}` ({f.flag.why}"
             + ("; stock runs it too)" if f.flag.control else ")") for f in forced]
    return f"Forces on CPU: {', '.join(flags)}."


def table() -> str:
    """The README's options table (``conf/config.yaml``'s groups, with ``forced_note``)."""
    return options_table(CONFIG_NAME, note=forced_note)


def main() -> None:
    """``python -m server.options``: print the README's options table;
    ``--controls <overrides>``: the overrides that run stock SGLang under the flags those
    overrides' options force (a live comparison's control row), one per line."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--controls", nargs="*", metavar="OVERRIDE",
                        help="a server command line's overrides (e.g. +cache=penelope)")
    args = parser.parse_args()
    with reader_may_leave():
        if args.controls is not None:
            try:
                print("\n".join(controls(resolve(compose(list(args.controls))))))
            except ConfigError as exc:
                raise SystemExit(f"switchboard: config error: {exc}") from None
        else:
            print(table())


if __name__ == "__main__":
    main()
