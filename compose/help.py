"""``--help`` of ``python -m server`` and ``python -m bench``, and the README's options table.

Both entry points print Hydra's own help page (``hydra.help`` in
``conf/config.yaml`` and ``conf/bench.yaml``): a written header and footer
around ``${switchboard_help:<root>}``, the resolver registered here, whose
value lists what the root config reads (``compose.catalog``: every option's
line comes from its class's docstring or its YAML's comment). The README's
options table is ``options_table`` with the server's note on each option (the
SGLang flags it forces: ``python -m server.options``), and
``tests/config/test_help.py`` holds it equal to the README, so that neither can
drift from ``conf/``.

NOTE: importing this module is light: policy modules are imported only when a
help text or table is built, SGLang and torch never.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from omegaconf import OmegaConf

from compose.catalog import Group, Option, groups, schema_nodes, schema_summary
from compose.config import CONFIG_NAME

#: The OmegaConf resolver ``hydra.help.template`` calls: ``${switchboard_help:<root config name>}``.
RESOLVER = "switchboard_help"
#: Width the help text is wrapped to.
WIDTH = 100
_OPTION_INDENT = 2


def _marks(option: Option) -> str:
    marks = [m for m in (option.builtin, "default" if option.default else None) if m]
    return f" [{'; '.join(marks)}]" if marks else ""


def _fill(text: str, head: str) -> str:
    """``text`` after ``head``, wrapped to ``WIDTH`` with a hanging indent under the text."""
    return textwrap.fill(text.replace("`", ""), WIDTH, initial_indent=head, subsequent_indent=" " * len(head),
                         break_on_hyphens=False, break_long_words=False)


def option_line(option: Option, width: int) -> str:
    """``option``'s help line(s): its name in a column of ``width``, the text wrapped."""
    params = f" Parameters: {', '.join(option.params)}." if option.params else ""
    return _fill(option.text + _marks(option) + params, " " * _OPTION_INDENT + option.name.ljust(width))


def group_line(group: Group) -> str:
    """``group``'s heading: how to choose an option, what the group chooses, its settings."""
    if group.kind:
        host = group.host_settings
        extra = f" Host settings (any option): {', '.join(f'{group.name}.{h}' for h in host)}." if host else ""
    else:
        extra = f" Fields: {group.name}.<field>=value."
    return _fill(group.text + extra, f"{group.flag}  ")


def groups_help(config_name: str) -> str:
    """The generated part of ``--help`` for ``conf/<config_name>.yaml`` (the resolver's value).

    NOTE: Hydra runs the template through ``string.Template``: ``$`` is doubled."""
    all_groups = groups(config_name)
    width = max(len(o.name) for g in all_groups for o in g.options) + 2
    kinds = [g for g in all_groups if g.kind]
    plain = [g for g in all_groups if not g.kind]
    lines = ["== Policy kinds: +<group>=<option> ==",
             textwrap.fill("A kind is chosen with a leading + (+policy=fairway): kinds are not in the defaults list, "
                           "so policy=fairway without it fails, as Hydra says. A kind not chosen keeps SGLang's "
                           "own behaviour. Set an option's parameters as <group>.<parameter>=value "
                           "(+policy=fairway policy.cap_ratio=2; typed by its class; --cfg job prints the "
                           "composed config with their values). [SGLang's own ...] marks an option the server "
                           "hands to SGLang's (or its gateway SMG's) own implementation.",
                           WIDTH), ""]
    for g in kinds:
        lines += [group_line(g)]
        lines += [option_line(o, width) for o in g.options] + [""]
    if plain:
        lines += ["== Config groups: <group>=<option> (no +) ==", ""]
        for g in plain:
            lines += [group_line(g)]
            lines += [option_line(o, width) for o in g.options] + [""]
    settings = [(key, schema_summary(name)) for key, name in schema_nodes(config_name).items()
                if key not in {g.name for g in all_groups}]
    described = [(key, text) for key, text in settings if text]
    if described:
        lines += ["== Settings: <node>.<field>=value ==", ""]
        key_width = max(len(k) for k, _ in described) + 4
        lines += [_fill(text, f"  {key + '.*':<{key_width}}") for key, text in described]
        lines.append("")
    return "\n".join(lines).replace("$", "$$")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


#: Extra text for one option's cell, from its group and option names (``""``: none).
OptionNote = Callable[[str, str], str]


def options_table(config_name: str, include_kinds: bool = True, note: OptionNote | None = None) -> str:
    """The markdown table of the groups ``conf/<config_name>.yaml`` reads; ``note`` adds
    a host's text to a kind's options (the server's: the SGLang flags each forces)."""
    rows = ["| group | option | what it does |", "|---|---|---|"]
    for g in groups(config_name, include_kinds):
        # NOTE: a plain group's text is its schema's docstring, registered by the entry point;
        # the table must not depend on which schemas this process registered.
        text = g.text if g.kind else f"config group, no `+`; fields `{g.name}.<field>=value`"
        if g.host_settings:
            text += f" Host settings (any option): {', '.join(f'`{g.name}.{h}`' for h in g.host_settings)}."
        rows.append(f"| `{g.flag}` | | {_cell(text)} |")
        for o in g.options:
            marks = [f"*{m}*" for m in (o.builtin, "default" if o.default else None) if m]
            params = [f"Parameters: {', '.join(f'`{p}`' for p in o.params)}."] if o.params else []
            extra = [note(g.name, o.name)] if note is not None and g.kind else []
            rows.append(f"| | `{o.name}` | {_cell(' '.join([o.text, *marks, *params, *filter(None, extra)]))} |")
    return "\n".join(rows)


def register_resolver() -> None:
    """Register ``${switchboard_help:<root>}`` (idempotent); the entry points call it before Hydra."""
    OmegaConf.register_new_resolver(RESOLVER, groups_help, replace=True)


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Around a page printed to stdout: a reader that stops early (``--help | head``)
    ends it quietly with status 0, not with a ``BrokenPipeError`` traceback."""
    try:
        yield
    except BrokenPipeError:
        # NOTE: the interpreter flushes stdout once more at exit; pointed at /dev/null, silently.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def main() -> None:
    """``python -m compose.help [--markdown] [--no-kinds] [root]``: print the generated help or table."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("root", nargs="?", default=CONFIG_NAME, help="root config name (config, bench)")
    parser.add_argument("--markdown", action="store_true", help="the README's options table")
    parser.add_argument("--no-kinds", action="store_true", help="leave out the policy kinds")
    args = parser.parse_args()
    with reader_may_leave():
        if args.markdown:
            print(options_table(args.root, include_kinds=not args.no_kinds))
        else:
            print(groups_help(args.root).replace("$$", "$"))


if __name__ == "__main__":
    main()
