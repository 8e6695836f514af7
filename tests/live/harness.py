"""Test-only helpers for a running Switchboard server (shared ones live in bench.live)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil

from bench.live.chat import loads, wait_for

_WORDS = ("time year people way day man thing woman life child world school state family "
          "student group country problem hand part place case week company system program "
          "question work government number night point home water room mother area money "
          "story fact month lot right study book eye job word business issue side kind head "
          "house service friend father power hour game line end member law car city name").split()


def unique_prompt(rng: random.Random, n_words: int) -> str:
    """A prompt no earlier request shares (a random first line), of ``n_words`` common words."""
    words = " ".join(rng.choice(_WORDS) for _ in range(n_words))
    return f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.choice(_WORDS)}: {words}"


@dataclass
class QueueExperiment:
    """A blocker occupies the single running slot; prompts queue behind it in a known order."""

    base_url: str
    finished: list[str] = field(default_factory=list)
    status: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _post(self, name: str, content: str, max_tokens: int, **extra: Any) -> None:
        body = {"model": "default", "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "temperature": 0, **extra}
        r = httpx.post(self.base_url + "/v1/chat/completions", json=body, timeout=600)
        with self.lock:
            self.finished.append(name)
            self.status[name] = r.status_code

    def run(self, prompts: dict[str, str], blocker_tokens: int = 480) -> list[str]:
        """Queue ``prompts`` in dict order behind a blocker; return the completion order.

        NOTE: the blocker must outlast building the queue; 480 tokens is ~30 s at the CPU
        server's ~15 tokens/s (160 ran out once in a loaded CI run). Once the queue is built it
        is aborted (SGLang's ``/abort_request``), which frees the slot as its end would."""
        rid = f"blocker-{random.getrandbits(64):016x}"
        threads = [threading.Thread(target=self._post, args=("blocker", "Count from one to two hundred.",
                                                             blocker_tokens), kwargs={"ignore_eos": True, "rid": rid})]
        threads[0].start()
        wait_for(lambda: loads(self.base_url)["num_running_reqs"] == 1, what="blocker running")
        for i, (name, content) in enumerate(prompts.items(), start=1):
            t = threading.Thread(target=self._post, args=(name, content, 4))
            t.start()
            threads.append(t)
            # NOTE: the next prompt is sent only once this one is in SGLang's waiting
            # queue, so the arrival order is known (server state, not sleeps).
            wait_for(lambda i=i: "blocker" in self.finished or loads(self.base_url)["num_waiting_reqs"] == i,
                     what=f"{name} queued")
            assert "blocker" not in self.finished, f"blocker finished before {name} was queued"
        httpx.post(self.base_url + "/abort_request", json={"rid": rid}, timeout=30).raise_for_status()
        for t in threads:
            t.join(timeout=600)
            assert not t.is_alive(), "a request hung"
        assert {v for k, v in self.status.items() if k != "blocker"} == {200}, self.status
        return [n for n in self.finished if n != "blocker"]


#: NOTE: slack on top of a grace for the exit itself, not for SGLang's drain: the supervisor checks its
#: deadline every 0.2 s before it SIGKILLs SGLang's process group, the killed processes are reaped
#: (unmapping the model) and the supervisor exits at once (``server.__main__._exit_now``): 0.2 s after
#: the grace on a quiet 2-core machine. A stop that ignored the grace overshoots by SGLang's own drain
#: (its SIGTERM watchdog looks every 5 s, then it stops the schedulers) or by the supervisor's
#: interpreter teardown (4 s with torch imported, which is what ``_exit_now`` skips).
EXIT_MARGIN_S = 2.0


def _alive(procs: list[psutil.Process], groups: set[int]) -> list[str]:
    """Processes of ``procs`` or in the process ``groups`` that have not exited (zombies have)."""
    found = {p.pid: p for p in procs}
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in groups:
                found.setdefault(p.pid, p)
        except (ProcessLookupError, PermissionError):
            pass
    alive = []
    for p in found.values():
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return alive


def assert_stops_within_grace(server: Any, sig: signal.Signals, grace_s: float) -> None:
    """``sig`` to the server stops every SGLang process within ``grace_s`` (+ ``EXIT_MARGIN_S``), no orphans."""
    procs = server.descendants()
    assert len(procs) >= 3, [p.name() for p in procs]  # SGLang main, scheduler, detokenizer
    groups = {os.getpgid(p.pid) for p in procs} - {os.getpgid(server.proc.pid)}  # SGLang's own group
    assert groups, "SGLang runs in the supervisor's process group"
    limit = grace_s + EXIT_MARGIN_S
    t0 = time.monotonic()
    elapsed = server.stop(sig, timeout=limit)  # NOTE: past ``limit`` it kills everything itself
    while (alive := _alive(procs, groups)) and time.monotonic() - t0 < limit:
        time.sleep(0.1)
    gone = time.monotonic() - t0
    assert not alive, f"{gone:.1f}s after {sig.name} (grace {grace_s:g}s + {EXIT_MARGIN_S:g}s) still alive: {alive}"
    assert elapsed <= limit, f"the server took {elapsed:.1f}s to stop on {sig.name}: over its grace " \
                             f"{grace_s:g}s + {EXIT_MARGIN_S:g}s"
    assert server.proc.returncode == 0


#: Tenants of ``tenant_cache_hits`` (SGLang's per-request ``cache_salt``).
TENANTS = ("tenant-a", "tenant-b")


def tenant_cache_hits(base_url: str, rng: random.Random, n_words: int = 30) -> dict[str, int]:
    """Cached prompt tokens of one fresh prompt sent by tenant A, again by A, then by tenant B
    and with no salt: ``{"a": ..., "a_again": ..., "b": ..., "unsalted": ...}``.

    NOTE: a tenant is SGLang's ``cache_salt``: it roots the request's radix key, so a
    tenant's repeat hits (``a_again`` > 0) while another tenant (or none) shares nothing."""
    prompt = unique_prompt(rng, n_words)

    def cached(salt: str | None) -> int:
        body: dict[str, Any] = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
        if salt is not None:
            body["cache_salt"] = salt
        r = httpx.post(base_url + "/generate", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return int(r.json()["meta_info"]["cached_tokens"])

    a = cached(TENANTS[0])
    return {"a": a, "a_again": cached(TENANTS[0]), "b": cached(TENANTS[1]), "unsalted": cached(None)}


def assert_tenants_share_nothing(hits: dict[str, int]) -> None:
    """``tenant_cache_hits``: a tenant's repeat hits; nobody else's request does."""
    assert hits["a"] == 0 and hits["a_again"] > 0, hits
    assert hits["b"] == 0 and hits["unsalted"] == 0, hits


#: What SGLang leaves free besides a HiCache host pool (``pool_host.base.HICACHE_HOST_MEMORY_RESERVE_BYTES``).
HICACHE_RESERVE_BYTES = 10 * 1024**3
#: SGLang's refusals of a HiCache host pool for want of RAM: auto-sizing's (``hicache_auto_size``) and an
#: explicit pool's (``pool_host.base.HostKVCache._allocate_host_buffer``).
HICACHE_REFUSALS = ("No host memory is left for HiCache", "Not enough host memory available")
#: The default model's KV bytes per token in float32 (30 layers x 3 KV heads x 64 x K and V x 4 bytes).
KV_BYTES_PER_TOKEN = 46_080


def wait_for_hicache_room(host_tokens: int, timeout: float = 300) -> None:
    """Wait until SGLang would grant the default model (float32) a HiCache host pool of ``host_tokens``.

    NOTE: SGLang refuses the pool at startup unless 10 GiB of RAM stay free besides it; on a
    24 GiB test machine the other pytest worker (a server, a simulation's process pool) can hold
    that for a while. Waiting for it is the harness's part; failing after ``timeout`` names it."""
    need = HICACHE_RESERVE_BYTES + host_tokens * KV_BYTES_PER_TOKEN + 2 * 1024**3  # NOTE: the server's own processes start first
    wait_for(lambda: psutil.virtual_memory().available >= need, timeout=timeout,
             what=f"{need / 1024**3:.1f} GiB of available host memory (SGLang's HiCache reserve + the pool)")


def refused_host_memory(server_error: str) -> bool:
    """Whether a server's start failed on one of SGLang's HiCache host-memory refusals (and only that)."""
    return any(refusal in server_error for refusal in HICACHE_REFUSALS)


def start_with_hicache_room(start: Any, host_tokens: int, *overrides: str, attempts: int = 3) -> Any:
    """``start(*overrides)`` (the ``start_server`` factory) once SGLang would grant a HiCache host pool
    of ``host_tokens``, again (at most ``attempts`` in all) if SGLang still refused the pool.

    NOTE: the wait and SGLang's own check are two moments: the other worker may start a server in
    between (seen: 8.6 GiB left at the check after the wait had seen enough)."""
    import pytest

    for attempt in range(attempts):
        wait_for_hicache_room(host_tokens)
        try:
            return start(*overrides)
        except pytest.fail.Exception as exc:
            if not refused_host_memory(str(exc)) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
