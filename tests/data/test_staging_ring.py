"""The pinned staging ring's bookkeeping (csrc/cuda/staging_ring.h), driven alone: no copy
in flight is ever overwritten, and no more copies are waited for than needed. (On the
emulated device every copy completes at once, so only this test can catch a reuse bug.)"""
import ctypes
import random

import pytest

import c_snippet

SLOTS = 8


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    so = c_snippet.build(tmp_path_factory, "plan", '#include "cuda/staging_ring.h"\n'
                         "size_t place(size_t h, size_t b, size_t c) { return mk_staging_ring_place(h, b, c); }\n"
                         "int retire(const size_t *bg, const size_t *en, int f, int n, int s, size_t b, size_t e)"
                         " { return mk_staging_ring_retire(bg, en, f, n, s, b, e); }\n",
                         "the staging plan's test library")
    so.place.restype = ctypes.c_size_t
    so.place.argtypes = [ctypes.c_size_t] * 3
    so.retire.argtypes = [ctypes.POINTER(ctypes.c_size_t)] * 2 + [ctypes.c_int] * 3 + [ctypes.c_size_t] * 2
    return so


def test_no_copy_in_flight_is_overwritten(plan):
    rng = random.Random(0)
    capacity = 1000
    begins, ends = (ctypes.c_size_t * SLOTS)(), (ctypes.c_size_t * SLOTS)()
    first = count = head = 0
    wrapped = 0
    for _ in range(5000):
        size = rng.choice([rng.randint(1, 60), rng.randint(200, 700)])
        begin = plan.place(head, size, capacity)
        wrapped += begin == 0 and head != 0
        end = begin + size
        assert end <= capacity
        inflight = [(begins[(first + k) % SLOTS], ends[(first + k) % SLOTS]) for k in range(count)]
        n = plan.retire(begins, ends, first, count, SLOTS, begin, end)
        kept = inflight[n:]
        assert all(e <= begin or end <= b for b, e in kept), "a copy still in flight would be overwritten"
        assert len(kept) < SLOTS
        if n > 0 and count < SLOTS:  # minimal: the newest retired one really overlapped
            b, e = inflight[n - 1]
            assert b < end and begin < e
        first, count = (first + n) % SLOTS, count - n
        slot = (first + count) % SLOTS
        begins[slot], ends[slot] = begin, end
        count += 1
        head = end
    assert wrapped > 100  # the wrap-to-0 case (the one that once reused a busy region) ran


def test_the_wrap_case_that_the_oldest_alone_would_miss(plan):
    # in flight, oldest first: [400, 600) before the wrap, then [0, 200) and [200, 350);
    # a copy of 300 after head 950 wraps to 0: the oldest does not overlap it, newer ones do
    begins = (ctypes.c_size_t * SLOTS)(400, 0, 200)
    ends = (ctypes.c_size_t * SLOTS)(600, 200, 350)
    assert plan.place(950, 300, 1000) == 0
    assert plan.retire(begins, ends, 0, 3, SLOTS, 0, 300) == 3
