"""What a rebuild (``python -m bench.scripts.all``) has finished, read back from the committed manifest.

NOTE: the record is ``bench/results/MANIFEST.md``'s last-rebuild section, rewritten after every
table, so an interrupted rebuild resumes on any machine that has the committed tables: a new
machine has none of the git-ignored files a run leaves behind. A table whose input is such a
file (a LEAP head under ``results/``) is run again together with the table that writes it
(``redo``), and so is every finished table that read the rewritten table's outputs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

LAST_RUN = "## The last rebuild"
TRACE_DATA = "Trace data (SHA-256):"
_HEADER = re.compile(r"at code commit ([0-9a-f]{7,40})")
_ROW = re.compile(r"^\| (\w+) \| `[^`]+` \| ([0-9.]+) min \|", re.M)


@dataclass(frozen=True)
class Table:
    """One committed table: the command that writes it and what it writes."""

    name: str
    args: tuple[str, ...]
    outputs: tuple[str, ...]
    live: bool = False
    """Starts CPU servers (timed; not in ``--quick``)."""
    after: tuple[str, ...] = ()
    """The tables whose outputs this one reads (run before it; a redo of one redoes this one)."""
    scratch: tuple[str, ...] = ()
    """Git-ignored files (repository-relative) this table writes for the tables ``after`` it."""
    needs: tuple[str, ...] = ()
    """The scratch files (of tables in ``after``) this table reads."""

    @property
    def command(self) -> str:
        return "python -m " + " ".join(self.args)


def recorded(manifest_text: str, commit: str) -> dict[str, float] | None:
    """The tables the manifest's last rebuild finished and their walls (seconds), when that
    rebuild ran at code commit ``commit``; ``None`` when it ran at another commit or none is recorded."""
    if LAST_RUN not in manifest_text:
        return None
    section = manifest_text[manifest_text.index(LAST_RUN):]
    header = _HEADER.search(section)
    if header is None or not (commit.startswith(header.group(1)) or header.group(1).startswith(commit)):
        return None
    rows = section.split(TRACE_DATA)[0]
    return {name: float(minutes) * 60 for name, minutes in _ROW.findall(rows)}


@dataclass
class Redo:
    """The finished tables a resumed run must run again, and why."""

    tables: set[str] = field(default_factory=set)
    reasons: list[str] = field(default_factory=list)


def redo(tables: Iterable[Table], done: Mapping[str, float], pending: Iterable[str], root: Path) -> Redo:
    """Finished tables to run again before ``pending`` ones: a producer whose scratch files are
    missing under ``root`` (another machine wrote them), and every finished table reading its outputs."""
    by_name = {t.name: t for t in tables}
    out = Redo()

    def again(name: str, reason: str, queue: list[str]) -> None:
        out.tables.add(name)
        out.reasons.append(f"{name}: {reason}")
        queue.append(name)

    writer = {path: t.name for t in by_name.values() for path in t.scratch}
    runs = list(pending)  # NOTE: grows: a table run again needs its own inputs too
    while runs:
        for path in by_name[runs.pop()].needs:
            producer = writer[path]
            if producer not in done or producer in out.tables or (root / path).exists():
                continue
            again(producer, f"{path} missing (written on another machine)", runs)
            # NOTE: the rerun rewrites its outputs: what read them (transitively) is rebuilt from the new ones
            rewritten = [producer]
            while rewritten:
                name = rewritten.pop()
                for reader in by_name.values():
                    if name in reader.after and reader.name in done and reader.name not in out.tables:
                        again(reader.name, f"reads {name}, which runs again", rewritten)
                        runs.append(reader.name)
    return out
