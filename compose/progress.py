"""Progress of long work: a tqdm bar on a terminal, plain periodic lines elsewhere.

Long first-run and bench work (the default model's fetch and conversion, the
tiny diffusion model's generation, the simulator sweeps of ``bench/scripts/``)
reports through ``Progress``::

    with Progress(len(jobs), "baselines", unit="run") as bar:
        for job in jobs:
            run(job)
            bar.update(status=job.name)

On a terminal (``stream.isatty()``) it is a tqdm bar (tqdm is a declared
dependency; it is imported only then). Anywhere else (CI logs, a file, a pipe)
it prints one plain line at the first step, then at most one every
``interval_s`` seconds, and the last step always, so that a log stays short
and still shows the run is alive::

    [switchboard] baselines: 3/16 runs (19%), 41 s, ~3 min left: azure_conversation lpm

Importing this module is light (no tqdm until a bar is drawn).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from types import TracebackType
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

#: Seconds between two plain lines when output is not a terminal.
INTERVAL_S = 30.0
#: Prefix of every plain line.
PREFIX = "[switchboard]"


def is_terminal(stream: TextIO) -> bool:
    """Whether a bar can be drawn on ``stream``: a tty, and not ``TERM=dumb``.

    NOTE: a stream without ``isatty`` (a test's buffer) counts as no terminal."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def _duration(seconds: float) -> str:
    """``41 s``, ``100 s``, ``3 min``, ``1.2 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Progress over ``total`` steps (``None``: unknown) named ``desc``.

    ``eta=False`` leaves the time-left estimate out of plain lines (steps of very
    different lengths); ``bar=False`` prints plain lines on a terminal too (a parent
    whose child processes draw their own bars there). ``update`` advances it,
    ``status`` names the current step without advancing, ``write`` prints a line
    without breaking the bar, ``close`` (or leaving the ``with`` block) ends it."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "step", stream: TextIO | None = None,
                 interval_s: float = INTERVAL_S, eta: bool = True, bar: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.eta = eta
        self.desc = desc
        self.unit = unit
        self.n = 0
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self._clock = clock
        self._t0 = clock()
        self._last_line: float | None = None
        self._printed_n: int | None = None
        self._text = ""
        self._closed = False
        self._bar: Any = None
        if bar and is_terminal(self.stream):
            from tqdm import tqdm

            # NOTE: dynamic_ncols follows the terminal's width; leave=True keeps the finished bar.
            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, dynamic_ncols=True)

    @property
    def is_bar(self) -> bool:
        """Whether a tqdm bar is drawn (else plain lines)."""
        return self._bar is not None

    def update(self, n: int = 1, status: str | None = None) -> None:
        """Advance by ``n`` steps; ``status`` names the step just done or the next one."""
        self.n += n
        if status is not None:
            self._text = status
        if self._bar is not None:
            if status is not None:
                self._bar.set_postfix_str(status, refresh=False)
            self._bar.update(n)
            return
        self._maybe_line()

    @property
    def text(self) -> str:
        """The current status ("": none yet)."""
        return self._text

    def status(self, text: str) -> None:
        """Name the step under way without advancing (a plain line too, at most one per ``interval_s``)."""
        self._text = text
        if self._bar is not None:
            self._bar.set_postfix_str(text)
        else:
            self._maybe_line()

    def write(self, message: str, file: TextIO | None = None) -> None:
        """Print ``message`` on its own line to ``file`` (default: the progress's stream),
        above the bar on a terminal.

        NOTE: a script's own output keeps its stream (``file=sys.stdout``): tqdm clears
        the bar on stderr, writes, and draws it again below."""
        out = file if file is not None else self.stream
        if self._bar is not None:
            self._bar.write(message, file=out)
        else:
            print(message, file=out, flush=True)

    def line(self) -> str:
        """The plain line for the current state."""
        elapsed = self._clock() - self._t0
        if self.total:
            done = f"{self.n}/{self.total} {self.unit}s ({self.n / self.total:.0%}), {_duration(elapsed)}"
            if self.eta and 0 < self.n < self.total:
                done += f", ~{_duration(elapsed / self.n * (self.total - self.n))} left"
        else:
            done = f"{self.n} {self.unit}s, {_duration(elapsed)}"
        return f"{PREFIX} {self.desc}: {done}" + (f": {self._text}" if self._text else "")

    def _maybe_line(self) -> None:
        now = self._clock()
        # NOTE: the first step and the last always print; between them at most one line per
        # interval_s, so a log of thousands of steps stays a few lines long.
        finished = self.total is not None and self.n >= self.total
        if self._last_line is None or finished or now - self._last_line >= self.interval_s:
            self._print()

    def _print(self) -> None:
        self._last_line, self._printed_n = self._clock(), self.n
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        """End the progress (idempotent): the bar is closed, or a last plain line printed
        unless the previous one already shows the final count."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self._printed_n != self.n:
            # NOTE: the log's last line is the final count, also where the work stopped early.
            self._print()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def track(items: Iterable[T], desc: str, *, total: int | None = None, unit: str = "step",
          stream: TextIO | None = None, interval_s: float = INTERVAL_S,
          label: Callable[[T], str] | None = None) -> Iterator[T]:
    """Yield ``items``, advancing a ``Progress`` after each (``label(item)`` is its status).

    ``total`` defaults to ``len(items)`` where ``items`` has one."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with Progress(total, desc, unit=unit, stream=stream, interval_s=interval_s) as bar:
        for item in items:
            yield item
            bar.update(status=label(item) if label is not None else None)
