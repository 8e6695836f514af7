"""KV tiers below the device: where a block's KV lives once it is backed up.

A *block* is a run of prefix-cache tokens on one path of the radix tree (a
node). When the host first backs a block up below the device (SGLang's HiCache
backup: write-through after a hit, or on device eviction), it asks the policy
for the block's *home*:

* ``MEMORY``: host memory only; evicted from there, the block is gone (or, with
  ``TierNeeds.demote``, written to SSD then);
* ``SSD``: storage only; host memory merely stages the write (and later reads),
  and the staged copy is freed once storage acknowledges it;
* ``BOTH``: host memory, written through to SSD as well (SGLang's inclusive
  hierarchy: storage holds a superset of memory);
* ``NONE``: not backed up; the block lives on the device only.

Contract (the host's side):
  * ``place`` is asked once per block, at its first backup below the device,
    with what the host knows then (``PlacementView``); the answer holds for the
    block's life: a home never changes, except that a ``MEMORY`` block evicted
    from host memory under ``demote`` moves to SSD.
  * NOTE: no block is held in memory and on SSD at once unless its home is
    ``BOTH`` (memory and SSD stay disjoint otherwise: the reuse capacity of the
    two levels adds up).
  * A block read back from either level is exact KV (checked on the host's
    side: a page that is missing or fails its checksum is a miss, and the
    prefix stops there).
  * Sessions: ``session_id`` is the request's session (SGLang's session id, or
    the gateway's header); the host reports finished requests
    (``ObservesFinished``) to a policy that has that face.

Contract (the policy's side): ``place`` is deterministic given the view and
what the policy learned from earlier views and finished requests (no clocks:
``now`` is the host's); it never answers a level the host lacks
(``SSD``/``BOTH`` when ``ssd_capacity_tokens`` is 0).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class Home(enum.Enum):
    """Where a block's KV lives below the device (see the module docs)."""

    MEMORY = "memory"
    SSD = "ssd"
    BOTH = "both"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class PlacementView:
    """A block at its first backup below the device, and the levels it may go to."""

    tokens: int
    """Tokens in the block."""
    prefix_tokens: int
    """Tokens before the block on its path (its position in the prompt)."""
    shared: bool
    """Another session (or a request without one) already used this path: a shared
    prefix such as a system prompt."""
    session_id: str | None
    """The request's session; ``None``: a request of its own."""
    session_tokens: int
    """Tokens of this session's context so far (its longest prompt plus reply seen)."""
    session_turns: int
    """Requests of this session seen so far, this one included."""
    last_reply_tokens: int
    """Tokens the session's previous reply generated (0 on its first turn)."""
    host_free_tokens: int
    """Host-memory slots free right now (what eviction would free not counted)."""
    host_capacity_tokens: int
    """Host-memory slots of the tier."""
    ssd_free_tokens: int
    """SSD slots free right now."""
    ssd_capacity_tokens: int
    """SSD slots of the tier; 0: the host has no SSD level."""
    now: float
    """Host time, in seconds."""

    def __post_init__(self) -> None:
        if self.tokens < 1 or min(self.prefix_tokens, self.session_tokens, self.last_reply_tokens) < 0:
            raise ValueError(f"a block needs tokens >= 1 and non-negative counts, got {self}")
        if self.session_turns < 1:
            raise ValueError(f"session_turns counts this request: >= 1, got {self.session_turns}")


@dataclass(frozen=True)
class TierNeeds:
    """What a tier policy needs from its host.

    NOTE: the one place a host learns a policy's optional needs."""

    ssd: bool = True
    """The policy needs an SSD level (``tier.ssd_dir``); ``False``: it runs on host
    memory alone (and uses an SSD level the host has)."""
    memory: bool = True
    """The policy homes blocks in host memory; ``False``: every block's home is SSD
    and host memory only stages reads and writes (SGLang's ``buffer_only``)."""
    demote: bool = False
    """A ``MEMORY`` block evicted from host memory is written to SSD instead of
    dropped (an exclusive two-level hierarchy)."""
    segments: bool = False
    """The host stores each session's SSD blocks contiguously (append-only session
    segments): a restore reads a run of blocks in one request, not one per page."""
    sessions: bool = False
    """The policy learns from finished requests (``ObservesFinished``) and reads
    the view's session fields; a host that cannot tell sessions apart refuses it."""


@runtime_checkable
class TierPolicy(Protocol):
    """Decides each block's home below the device, once, at its first backup."""

    needs: TierNeeds

    def place(self, view: PlacementView) -> Home:
        """The block's home (see the module docs)."""
        ...


#: The server's SSD stores (``TierHostConfig.storage``).
STORAGES = ("file", "segments")


@dataclass(frozen=True)
class TierHostConfig:
    """Host settings under ``tier.*``: the deployment's levels, not the placement.

    NOTE: both hosts read them from ``PolicySpec.host``, never from the policy;
    the server checks the directory and the sizes against the machine at startup."""

    host_ratio: float = 2.0
    """Host-memory tokens per device-pool token (SGLang's ``--hicache-ratio``; its
    default 2.0). The simulator's host level holds ``host_ratio`` times its device pool."""
    ssd_dir: str = ""
    """Directory of the SSD level (SGLang's file storage writes its pages there);
    empty: no SSD level, which an option that places blocks on SSD refuses."""
    ssd_gb: float = 0.0
    """Size of the SSD level in GB (1e9 bytes): the server's storage drops its
    least recently used pages past it; the simulator's SSD holds this many bytes
    of KV. Must be > 0 with an SSD level, and fit the free space of ``ssd_dir``."""
    segment_tokens: int = 4096
    """Tokens per segment: with ``storage=segments`` the server closes a segment file
    at this many tokens; the simulator reads an option that stores sessions
    contiguously (``TierNeeds.segments``) one segment per request to the SSD
    (without segments, a read per stored page)."""
    storage: str = "file"
    """The server's SSD store: ``file`` (SGLang's file storage: a file per page,
    unchecked) or ``segments`` (Switchboard's: a write batch's pages contiguous in
    append-only segments, each page checked on read, a damaged page a miss)."""

    def __post_init__(self) -> None:
        if not self.host_ratio > 0:
            raise ValueError(f"host_ratio: must be > 0, got {self.host_ratio}")
        if self.ssd_gb < 0:
            raise ValueError(f"ssd_gb: must be >= 0, got {self.ssd_gb}")
        if bool(self.ssd_dir) != (self.ssd_gb > 0):
            raise ValueError("ssd_dir: an SSD level needs both ssd_dir and ssd_gb > 0 "
                             f"(got ssd_dir={self.ssd_dir!r}, ssd_gb={self.ssd_gb})")
        if self.segment_tokens < 1:
            raise ValueError(f"segment_tokens: must be >= 1, got {self.segment_tokens}")
        if self.storage not in STORAGES:
            raise ValueError(f"storage: must be one of {', '.join(STORAGES)}, got {self.storage!r}")

    @property
    def has_ssd(self) -> bool:
        """Whether the deployment has an SSD level."""
        return self.ssd_gb > 0


def check_home(home: Home, view: PlacementView) -> Home:
    """``home`` if the host can honour it for ``view``; ``ValueError`` naming the breach otherwise."""
    if not isinstance(home, Home):
        raise ValueError(f"a tier policy must answer a Home, got {home!r}")
    if home in (Home.SSD, Home.BOTH) and view.ssd_capacity_tokens == 0:
        raise ValueError(f"a tier policy placed a block on SSD ({home.value}) but the host has no SSD level")
    return home
