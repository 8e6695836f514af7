"""The SSD level's segment store (``server/sglang/hicache/segments.py``): contiguous pages,
checked reads, bounded size; a missing or corrupt page is a miss, never wrong bytes."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from server.sglang.hicache.segments import SegmentStore

PAGE = 64


def page(n: int) -> bytes:
    return bytes([n % 251]) * PAGE


def test_a_write_batch_lies_contiguously_and_reads_back_in_one_range(tmp_path):
    store = SegmentStore(str(tmp_path), max_bytes=10_000, segment_pages=8)
    assert store.put(["a", "b", "c"], [page(1), page(2), page(3)]) == [True, True, True]
    assert store.get(["a", "b", "c"]) == [page(1), page(2), page(3)]
    assert store.range_reads == 1 and store.pages_read == 3
    assert store.prefix(["a", "b", "x", "c"]) == 2
    # a stored key is skipped, not written twice
    assert store.put(["b"], [page(9)]) == [True] and store.get(["b"]) == [page(2)]
    store.check()


def test_a_discarded_page_reads_as_absent_and_a_new_write_stores_it_again(tmp_path):
    store = SegmentStore(str(tmp_path), max_bytes=10_000, segment_pages=8)
    store.put(["a", "b", "c"], [page(1), page(2), page(3)])
    assert store.discard(["b", "x"]) == 1
    assert store.prefix(["a", "b", "c"]) == 1 and store.get(["b"]) == [None]
    assert store.missing_pages == 1  # NOTE: read as a miss like any absent page
    assert store.put(["b"], [page(7)]) == [True] and store.get(["a", "b", "c"]) == [page(1), page(7), page(3)]
    store.check()


def test_each_group_appends_to_its_own_segment(tmp_path):
    store = SegmentStore(str(tmp_path), max_bytes=10_000, segment_pages=8)
    for k in range(3):  # two sessions' writes interleaved
        store.put([f"a{k}"], [page(k)], group="a")
        store.put([f"b{k}"], [page(10 + k)], group="b")
    assert store.get(["a0", "a1", "a2"]) == [page(0), page(1), page(2)] and store.range_reads == 1
    assert len(store.sizes) == 2
    # a full segment is closed: the next page opens another
    small = SegmentStore(str(tmp_path / "small"), max_bytes=10_000, segment_pages=2)
    small.put(["x", "y", "z"], [page(1), page(2), page(3)])
    assert len(small.sizes) == 2 and small.get(["x", "y", "z"]) == [page(1), page(2), page(3)]
    assert small.range_reads == 2


def test_a_corrupt_page_reads_as_a_miss_and_is_counted(tmp_path):
    store = SegmentStore(str(tmp_path), max_bytes=10_000, segment_pages=8)
    store.put(["a", "b", "c"], [page(1), page(2), page(3)])
    path = store.path(store.index["b"].segment)
    with open(path, "r+b") as f:  # flip one byte of page b
        f.seek(store.index["b"].offset + 5)
        f.write(b"\xff")
    assert store.get(["a", "b", "c"]) == [page(1), None, page(3)]
    assert store.corrupt_pages == 1 and "b" not in store.index and store.prefix(["a", "b"]) == 1
    # a truncated segment: short pages are misses too
    os.truncate(path, PAGE + 10)
    assert store.get(["a", "c"]) == [page(1), None] and store.missing_pages == 1
    assert store.get(["nothing"]) == [None] and store.missing_pages == 2


def test_past_its_size_the_oldest_segments_go(tmp_path):
    store = SegmentStore(str(tmp_path), max_bytes=4 * PAGE, segment_pages=2)
    store.put(["a", "b"], [page(1), page(2)])
    store.put(["c", "d"], [page(3), page(4)])
    store.put(["e"], [page(5)])
    assert store.stored_bytes <= 4 * PAGE and store.get(["a", "c", "e"]) == [None, page(3), page(5)]
    assert not os.path.exists(store.path(0))
    store.check()


def test_a_write_that_fails_stores_nothing_of_the_rest(tmp_path):
    store = SegmentStore(str(tmp_path / "ssd"), max_bytes=10_000, segment_pages=8)
    os.rmdir(tmp_path / "ssd")
    (tmp_path / "ssd").write_text("a file where the directory was")
    assert store.put(["a", "b"], [page(1), page(2)]) == [False, False]
    assert store.index == {} and store.stored_bytes == 0


def test_a_new_store_starts_empty(tmp_path):
    SegmentStore(str(tmp_path), max_bytes=10_000, segment_pages=8).put(["a"], [page(1)])
    again = SegmentStore(str(tmp_path), max_bytes=10_000, segment_pages=8)
    assert again.get(["a"]) == [None] and not [n for n in os.listdir(tmp_path) if n.endswith(".seg")]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "get", "flip"]), st.integers(0, 11), st.integers(1, 4),
                          st.sampled_from([None, "s1", "s2"])), max_size=40))
def test_reads_never_return_bytes_other_than_those_written(tmp_path_factory, steps):
    directory = tmp_path_factory.mktemp("segments")
    store = SegmentStore(str(directory), max_bytes=10 * PAGE, segment_pages=3)
    written: dict[str, bytes] = {}
    for op, start, n, group in steps:
        keys = [f"k{i}" for i in range(start, start + n)]
        if op == "put":
            pages = [page(i * 7 + len(written)) for i in range(n)]
            fresh = [key not in store.index for key in keys]
            for key, data, ok, new in zip(keys, pages, store.put(keys, pages, group), fresh):
                if ok and new:
                    written[key] = data
        elif op == "get":
            for key, data in zip(keys, store.get(keys)):
                assert data is None or data == written[key]
        elif keys[0] in store.index:
            ref = store.index[keys[0]]
            with open(store.path(ref.segment), "r+b") as f:
                f.seek(ref.offset)
                f.write(bytes([(page(0)[0] + 1 + start) % 256]) * 3)
        store.check()
