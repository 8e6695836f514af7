"""Several replicas behind one gateway: the routing seam (``+router``, ``sim.replicas``).

``Cluster`` owns the trace's arrival stream (``arrivals.Arrivals``: roots at
their times, closed-loop followers released when the turn they follow ends
on whichever replica served it) and N ``Simulator`` replicas, each an
independent SGLang server with its own queue, cache and policies. It
advances them in time order, one forward pass at a time:

* the next event is the earliest of the next arrival and every busy
  replica's clock; arrivals win ties (a request arriving at ``t`` is routed
  before any replica starts an iteration at ``t``);
* an arriving request is offered to the router once, at its arrival time,
  with the view the gateway has then (``policies.router``): every registered
  replica (``routing.replica_url``) with its in-flight count, i.e. requests
  routed to it whose final state (finished, rejected, aborted) came at or
  before ``t``, all healthy; the request's routing text, routing key and a
  fresh 64-bit draw from the cluster's seeded generator;
* the request enters the chosen replica's inbox and arrives there at its
  own arrival time (an idle replica jumps to it, as a lone simulator does).

NOTE (causality): a replica's completions happen at its iteration ends. When
a request is routed at ``t`` every replica's clock is at or past ``t``, so
every completion at or before ``t`` is known; completions later than ``t``
that a replica already simulated are held back (``_done``) until routing
time passes them. With one replica the replay is the lone simulator's, bit
for bit (``tests/sim/test_sim_router.py``).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Iterator, Sequence

from bench.metrics import RequestRecord
from bench.schema import RoutingKey
from bench.sim.arrivals import Arrivals
from bench.sim.engine import Simulator
from bench.sim.routing import replica_url, routing_key, routing_text
from bench.traces.trace import Trace, TraceRequest
from policies.router import RouterPolicy, RouteView, WorkerView, check_decision


class Inbox:
    """A replica's arrivals: the requests routed to it (``Simulator.arrivals``)."""

    def __init__(self, cluster: Cluster, index: int) -> None:
        self.cluster, self.index = cluster, index
        self._heap: list[tuple[float, int, TraceRequest]] = []
        self._tie = itertools.count()

    def push(self, at: float, tr: TraceRequest) -> None:
        heapq.heappush(self._heap, (at, next(self._tie), tr))

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def until(self, t: float) -> Iterator[tuple[float, TraceRequest]]:
        while self._heap and self._heap[0][0] <= t:
            at, _, tr = heapq.heappop(self._heap)
            yield at, tr

    def release_followers(self, rid: str, now: float) -> None:
        """``rid`` reached a final state on this replica (``Simulator._final``)."""
        self.cluster.on_final(self.index, rid, now)


class Cluster:
    """N replicas behind a router (see module docs)."""

    def __init__(self, trace: Trace, replicas: Sequence[Simulator], router: RouterPolicy, *,
                 seed: int = 0, key: RoutingKey = RoutingKey.none) -> None:
        if not replicas:
            raise ValueError("a cluster needs at least one replica")
        self.trace, self.router, self.key = trace, router, key
        self.replicas = list(replicas)
        self.urls = tuple(replica_url(i) for i in range(len(replicas)))
        self.arrivals = Arrivals(trace)
        self.inboxes = [Inbox(self, i) for i in range(len(replicas))]
        for sim, inbox in zip(self.replicas, self.inboxes, strict=True):
            sim.arrivals = inbox
        self.in_flight = [0] * len(replicas)
        self._done: list[tuple[float, int, int]] = []
        """Completions not yet seen by the gateway: (time, tie, replica)."""
        self._tie = itertools.count()
        self.rng = random.Random(seed)
        self.assignment: dict[str, int] = {}
        """Replica of every routed request, by rid."""
        self.routed: list[tuple[float, TraceRequest, int]] = []
        """Every routing call in order: (arrival time, request, draw)."""
        self.finished_at: dict[str, float] = {}
        """When each request reached its final state."""
        self.branches: Counter[str] = Counter()
        """Router decisions by ``RouteDecision.branch``."""

    # ---------------------------------------------------------------- routing
    def on_final(self, replica: int, rid: str, now: float) -> None:
        """A request left ``replica`` at ``now``: its followers are released, and
        the gateway stops counting it once routing time reaches ``now``."""
        heapq.heappush(self._done, (now, next(self._tie), replica))
        self.finished_at[rid] = now
        self.arrivals.release_followers(rid, now)

    def _route(self, at: float, tr: TraceRequest) -> None:
        while self._done and self._done[0][0] <= at:
            self.in_flight[heapq.heappop(self._done)[2]] -= 1
        draw = self.rng.getrandbits(64)
        view = RouteView(text=routing_text(tr, self.trace.block_size),
                         workers=tuple(WorkerView(u, n) for u, n in zip(self.urls, self.in_flight, strict=True)),
                         draw=draw, routing_key=routing_key(tr, self.key))
        decision = check_decision(view, self.router.route(view))
        self.branches[decision.branch] += 1
        self.in_flight[decision.worker] += 1
        self.assignment[tr.rid] = decision.worker
        self.routed.append((at, tr, draw))
        self.inboxes[decision.worker].push(at, tr)

    # ------------------------------------------------------------------- loop
    def _next_event(self, i: int) -> float:
        sim = self.replicas[i]
        if sim.has_work:
            return sim.now
        nxt = self.inboxes[i].next_time()
        return max(sim.now, nxt) if nxt != float("inf") else nxt

    def run(self) -> None:
        """Replay the whole trace over every replica."""
        while True:
            events = [self._next_event(i) for i in range(len(self.replicas))]
            first = min(range(len(events)), key=events.__getitem__)
            t_arr = self.arrivals.next_time()
            if t_arr == float("inf") and events[first] == float("inf"):
                while self._done:  # NOTE: the replay is over: nothing is in flight
                    self.in_flight[heapq.heappop(self._done)[2]] -= 1
                return
            if t_arr <= events[first]:
                for at, tr in self.arrivals.until(t_arr):
                    self._route(at, tr)
            else:
                self.replicas[first].step()

    # ---------------------------------------------------------------- results
    def merged(self, per_replica: Sequence[Sequence[RequestRecord]]) -> list[RequestRecord]:
        """Every replica's records (each in arrival order) as one list in arrival order
        (ties: lower replica first)."""
        return list(heapq.merge(*per_replica, key=lambda r: r.arrival_s))


class ClusterSampler:
    """Queue length and KV use summed over replicas, at most every ``dt`` simulated
    seconds (each replica's ``on_sample``; a row's time is the sampling replica's clock)."""

    def __init__(self, cluster: Cluster, dt: float) -> None:
        self.cluster, self.dt = cluster, dt
        self._next = 0.0
        self.rows: list[tuple[float, int, int, int, int]] = []

    def __call__(self, sim: Simulator) -> None:
        if sim.now < self._next:
            return
        self._next = sim.now + self.dt
        reps = self.cluster.replicas
        self.rows.append((sim.now, sum(len(s.queue) for s in reps), sum(len(s.running) for s in reps),
                          sum(s.cache.tree_tokens + s.private_tokens for s in reps),
                          sum(s.cache.tree_tokens for s in reps)))
