"""The simulator's side of the tier kind: what a placement sees, and what an SSD costs.

* ``SessionStats``: per session, what the server would know when a block is
  first backed up (its context so far, its turns, its last reply), kept from
  the requests the simulator has seen arrive and finish, nothing later.
* ``make_placer``: the ``radix.tiers.TieredHost`` placer that builds the
  ``PlacementView`` of a freed node and asks the tier policy (checked by
  ``check_home``).
* ``SsdDevice``: one SSD shared by reads and writes: a read waits for what is
  queued before it, then costs its bytes at the read bandwidth plus a fixed
  latency per read (one read per stored page, or one per contiguous segment);
  writes (backups, demotions) queue at the write bandwidth. Host memory is a
  plain bandwidth (``PrefixCache.restore_s``).

NOTE: nothing here reads a clock of its own: times are the simulator's ``now``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policies.tier import Home, PlacementView, TierPolicy, check_home
from radix.node import Node
from radix.tiers import Placer, TieredHost


@dataclass
class _Seen:
    tokens: int = 0
    turns: int = 0
    last_reply: int = 0


class SessionStats:
    """What the server knows of each session so far (see module docs)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def arrived(self, session: str | None, prompt_tokens: int) -> None:
        """A request of ``session`` arrived with a ``prompt_tokens`` prompt."""
        if session is None:
            return
        seen = self._seen.setdefault(session, _Seen())
        seen.turns += 1
        seen.tokens = max(seen.tokens, prompt_tokens)

    def finished(self, session: str | None, prompt_tokens: int, output_tokens: int) -> None:
        """A request of ``session`` finished: its reply is the session's last."""
        if session is None:
            return
        seen = self._seen.setdefault(session, _Seen())
        seen.last_reply = output_tokens
        seen.tokens = max(seen.tokens, prompt_tokens + output_tokens)

    def of(self, session: str | None) -> tuple[int, int, int]:
        """``(context tokens, turns, last reply tokens)`` of ``session`` (zeros if unknown or ``None``)."""
        seen = self._seen.get(session) if session is not None else None
        return (0, 0, 0) if seen is None else (seen.tokens, seen.turns, seen.last_reply)


def make_placer(policy: TierPolicy, stats: SessionStats, clock: Callable[[], float], block_size: int) -> Placer:
    """The placer a ``TieredHost`` asks for each freed node (see module docs)."""

    def place(node: Node[Any, Any], host: TieredHost) -> Home:
        tokens, turns, last_reply = stats.of(node.session)
        view = PlacementView(
            tokens=node.num_tokens, prefix_tokens=node.start * block_size, shared=bool(node.others),
            session_id=node.session, session_tokens=tokens, session_turns=max(1, turns),
            last_reply_tokens=last_reply, host_free_tokens=host.memory.free(),
            host_capacity_tokens=host.memory.capacity, ssd_free_tokens=host.ssd.free(),
            ssd_capacity_tokens=host.ssd.capacity, now=clock())
        return check_home(policy.place(view), view)

    return place


class SsdDevice:
    """One SSD: reads and writes queue on it (see module docs)."""

    def __init__(self, read_gbs: float, write_gbs: float, read_latency_s: float) -> None:
        if read_gbs <= 0 or write_gbs <= 0 or read_latency_s < 0:
            raise ValueError("an SSD needs positive bandwidths and a non-negative read latency")
        self.read_bps = read_gbs * 1e9
        self.write_bps = write_gbs * 1e9
        self.read_latency_s = read_latency_s
        self.busy_until = 0.0
        """When the SSD finishes what is queued on it (simulated seconds)."""
        self.bytes_read = 0.0
        self.bytes_written = 0.0

    def write(self, now: float, nbytes: float) -> None:
        """Queue a background write of ``nbytes`` at ``now``."""
        self.busy_until = max(self.busy_until, now) + nbytes / self.write_bps
        self.bytes_written += nbytes

    def read(self, now: float, nbytes: float, reads: int) -> float:
        """Read ``nbytes`` in ``reads`` requests, starting at ``now``; the seconds until it is done."""
        start = max(self.busy_until, now)
        self.busy_until = start + nbytes / self.read_bps + reads * self.read_latency_s
        self.bytes_read += nbytes
        return self.busy_until - now
