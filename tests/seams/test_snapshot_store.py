"""HiState's SSD snapshot store (``server/sglang/cache/snapshots.py``): one checked file per
snapshot, bounded size, refusals instead of evictions; a damaged file is a miss, never wrong bytes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from server.sglang.cache.snapshots import SnapshotStore

F = SnapshotStore.footprint


def snap(n: int, size: int = 100) -> bytes:
    return bytes((n + i) % 251 for i in range(size))


def flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_round_trip_and_accounting(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path / "s"), max_bytes=10_000)
    assert store.put("a", snap(1)) and store.put("b", memoryview(snap(2, 50)))
    assert store.get("a") == snap(1) and store.get("b") == snap(2, 50) and store.get("x") is None
    assert (store.hits, store.misses, store.corrupt) == (2, 1, 0)
    assert "a" in store and "x" not in store and len(store) == 2 and sorted(store.keys()) == ["a", "b"]
    assert store.used_bytes == F(100) + F(50) and store.free_bytes == 10_000 - store.used_bytes
    assert store.put("", b"") and store.get("") == b""  # empty key, empty payload
    assert store.delete("a") and not store.delete("a") and store.get("a") is None
    assert store.used_bytes == F(50) + F(0)
    store.check()


def test_arbitrary_keys_are_safe_file_names(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    keys = ["../../etc/passwd", "a/b\\c", "\x00nul", "é" * 300, "\ud800"]
    for n, key in enumerate(keys):
        assert store.put(key, snap(n, 10))
    assert [store.get(k) for k in keys] == [snap(n, 10) for n in range(len(keys))]
    assert len(os.listdir(tmp_path)) == len(keys)
    store.check()


def test_replacing_a_key_keeps_accounting_exact(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=F(100) + F(30))
    assert store.put("a", snap(1, 100)) and store.put("b", snap(2, 30))
    assert store.put("a", snap(3, 40)) and store.get("a") == snap(3, 40)
    assert store.used_bytes == F(40) + F(30) and len(store) == 2
    # the replaced snapshot's room counts: growing back to 100 fits, 101 does not
    assert store.put("a", snap(4, 100)) and not store.put("a", snap(5, 101))
    assert store.get("a") == snap(4, 100)
    store.check()


def test_a_full_store_refuses_and_changes_nothing(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=2 * F(100))
    assert store.put("a", snap(1)) and store.put("b", snap(2))
    before = (sorted(os.listdir(tmp_path)), store.used_bytes)
    assert not store.put("c", snap(3, 1))  # NOTE: no eviction: the caller chooses what goes
    assert (sorted(os.listdir(tmp_path)), store.used_bytes) == before and "c" not in store
    assert store.get("a") == snap(1) and store.get("b") == snap(2)
    assert store.delete("b") and store.put("c", snap(3, 100))  # room made by the caller
    store.check()


def test_an_oversize_snapshot_is_refused(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=F(100))
    assert not store.put("big", snap(1, 101)) and len(store) == 0 and os.listdir(tmp_path) == []
    assert store.put("fits", snap(1, 100)) and store.free_bytes == 0
    store.check()
    with pytest.raises(ValueError):
        SnapshotStore(str(tmp_path / "z"), max_bytes=0)


def assert_damaged_miss(store: SnapshotStore, key: str, size: int) -> None:
    corrupt, misses, used = store.corrupt, store.misses, store.used_bytes
    path = store.path(key)
    assert store.get(key) is None
    assert (store.corrupt, store.misses, store.used_bytes) == (corrupt + 1, misses + 1, used - size)
    assert key not in store and not os.path.exists(path)
    assert store.get(key) is None and store.corrupt == corrupt + 1  # now simply absent
    store.check()


@pytest.mark.parametrize("at", [0, 5, 6, 20, F(0), F(0) + 99])  # magic, version, length, digest, payload
def test_a_flipped_byte_is_a_miss(tmp_path: Path, at: int) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    store.put("a", snap(1))
    store.put("b", snap(2))
    flip(store.path("a"), at)
    assert_damaged_miss(store, "a", F(100))
    assert store.get("b") == snap(2)


@pytest.mark.parametrize("keep", [0, 10, F(0), F(100) - 1])
def test_a_truncated_file_is_a_miss(tmp_path: Path, keep: int) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    store.put("a", snap(1))
    os.truncate(store.path("a"), keep)
    assert_damaged_miss(store, "a", F(100))


def test_a_longer_file_is_a_miss(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    store.put("a", snap(1))
    with open(store.path("a"), "ab") as f:
        f.write(b"\0")
    assert_damaged_miss(store, "a", F(100))


def test_a_file_rewritten_with_a_consistent_header_of_another_length_is_a_miss(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    store.put("a", snap(1))
    other = SnapshotStore(str(tmp_path / "o"), max_bytes=10_000)
    other.put("a", snap(1, 60))  # a valid file for key "a", but not the length this store wrote
    shutil.copyfile(other.path("a"), store.path("a"))
    assert_damaged_miss(store, "a", F(100))


@pytest.mark.parametrize("same_payload", [False, True])
def test_files_swapped_between_two_keys_are_misses(tmp_path: Path, same_payload: bool) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    store.put("a", snap(1))
    store.put("b", snap(1 if same_payload else 2))
    pa, pb = store.path("a"), store.path("b")
    os.rename(pa, pa + ".x")
    os.rename(pb, pa)
    os.rename(pa + ".x", pb)
    assert_damaged_miss(store, "a", F(100))
    assert_damaged_miss(store, "b", F(100))
    assert store.hits == 0


def test_a_deleted_file_is_a_miss(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    store.put("a", snap(1))
    os.remove(store.path("a"))
    assert_damaged_miss(store, "a", F(100))
    # deleting or re-putting a key whose file vanished keeps accounting exact
    store.put("b", snap(2))
    os.remove(store.path("b"))
    assert store.delete("b") and store.used_bytes == 0
    store.put("c", snap(3))
    os.remove(store.path("c"))
    assert store.put("c", snap(4)) and store.get("c") == snap(4) and store.used_bytes == F(100)
    store.check()


def test_stale_files_of_an_earlier_process_are_removed_at_open(tmp_path: Path) -> None:
    first = SnapshotStore(str(tmp_path), max_bytes=10_000)
    first.put("a", snap(1))
    first.put("b", snap(2))
    with open(first.path("c") + ".tmp", "wb") as f:  # a write cut short
        f.write(b"partial")
    (tmp_path / "other.txt").write_text("not ours")
    second = SnapshotStore(str(tmp_path), max_bytes=10_000)
    assert os.listdir(tmp_path) == ["other.txt"]
    assert len(second) == 0 and second.used_bytes == 0 and second.get("a") is None
    second.check()


KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
DAMAGE = st.sampled_from(["flip", "truncate", "delete", "swap"])


class StoreMachine(RuleBasedStateMachine):
    """Random put/get/delete/damage against a dict model; ``check`` after every step."""

    MAX = 3 * F(40)

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="snapshots-")
        self.store = SnapshotStore(self.dir, self.MAX)
        self.model: dict[str, bytes] = {}
        self.bad: set[str] = set()
        """Keys whose file was damaged (their next read must be a counted miss)."""
        self.resized: set[str] = set()
        """Damaged keys whose file's size changed (``check`` would rightly fail until they are read)."""

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _gone(self, key: str) -> None:
        self.model.pop(key, None)
        self.bad.discard(key)
        self.resized.discard(key)

    @rule(key=KEYS, size=st.integers(0, 130), seed=st.integers(0, 250))
    def put(self, key: str, size: int, seed: int) -> None:
        used = sum(F(len(v)) for v in self.model.values())
        fits = used - (F(len(self.model[key])) if key in self.model else 0) + F(size) <= self.MAX
        assert self.store.put(key, snap(seed, size)) == fits
        if fits:
            self._gone(key)
            self.model[key] = snap(seed, size)

    @rule(key=KEYS)
    def get(self, key: str) -> None:
        corrupt = self.store.corrupt
        got = self.store.get(key)
        if key in self.bad:
            assert got is None and self.store.corrupt == corrupt + 1
            self._gone(key)
        else:
            assert got == self.model.get(key) and self.store.corrupt == corrupt

    @precondition(lambda self: self.bad)
    @rule(data=st.data())
    def get_damaged(self, data: st.DataObject) -> None:
        self.get(data.draw(st.sampled_from(sorted(self.bad))))

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        assert self.store.delete(key) == (key in self.model)
        self._gone(key)

    @precondition(lambda self: set(self.model) - self.bad)
    @rule(data=st.data(), how=DAMAGE)
    def damage(self, data: st.DataObject, how: str) -> None:
        sound = sorted(set(self.model) - self.bad)
        key = data.draw(st.sampled_from(sound))
        path = self.store.path(key)
        size = os.path.getsize(path)
        if how == "flip":
            flip(path, data.draw(st.integers(0, size - 1)))
        elif how == "truncate":
            os.truncate(path, data.draw(st.integers(0, size - 1)))
            self.resized.add(key)
        elif how == "delete":
            os.remove(path)
            self.resized.add(key)
        else:
            other = data.draw(st.sampled_from(sound))
            if other == key:
                return
            tmp = path + ".swap"
            os.rename(path, tmp)
            os.rename(self.store.path(other), path)
            os.rename(tmp, self.store.path(other))
            self.bad.add(other)
            self.resized |= {key, other}
        self.bad.add(key)

    @invariant()
    def agrees(self) -> None:
        assert sorted(self.store.keys()) == sorted(self.model) and len(self.store) == len(self.model)
        assert self.store.used_bytes == sum(F(len(v)) for v in self.model.values())
        if not self.resized:
            self.store.check()


StoreMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_store_machine = StoreMachine.TestCase
