"""Prometheus counters and gauges of the adapter (``/metrics`` of the SGLang server)."""

from __future__ import annotations

import functools
from typing import Any


class Unmetered:
    """Stands in for a counter or gauge without prometheus_client: takes every update, exports nothing."""

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def labels(self, **_: str) -> Unmetered:
        return self


@functools.cache
def prometheus_counter(name: str, documentation: str, labelnames: tuple[str, ...] = ()) -> Any:
    """The process's counter ``name`` (with ``labelnames``: call ``.labels(...)``), created once
    (prometheus_client refuses a second registration of one name); ``Unmetered`` without
    prometheus_client."""
    try:
        from prometheus_client import Counter
    except ImportError:  # NOTE: metrics are optional; the log lines still count
        return Unmetered()
    return Counter(name, documentation, labelnames)


@functools.cache
def prometheus_gauge(name: str, documentation: str) -> Any:
    """The process's gauge ``name``, created once; ``Unmetered`` without prometheus_client.

    NOTE: under SGLang's multiprocess metrics each live process's value is
    exported (``livesum``: one scheduler per rank sums to the rank's value)."""
    try:
        from prometheus_client import Gauge
    except ImportError:  # NOTE: metrics are optional; the log lines still count
        return Unmetered()
    return Gauge(name, documentation, multiprocess_mode="livesum")
