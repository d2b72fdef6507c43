/* Where a staged copy goes in the pinned ring, and which copies in flight must finish
 * first: the bookkeeping of staging_ring.cu, kept free of CUDA so tests can drive it alone
 * (tests/data/test_staging_ring.py). Plain C, also compiled as C++. The batch slots that use
 * this ring (through to_device) are core/staging.h, which says why both are "staging". */
#ifndef MANAKA_CUDA_STAGING_RING_H
#define MANAKA_CUDA_STAGING_RING_H
#include <stddef.h>

/* Start of the next copy of `bytes` (<= capacity) after `head`: right there if it fits
 * before the end of the ring, else at 0. */
static inline size_t mk_staging_ring_place(size_t head, size_t bytes, size_t capacity) {
    return head + bytes <= capacity ? head : 0;
}

/* How many of the `count` regions in flight, kept oldest first in a circular array of
 * `slots` entries from index `first` (begins[i], ends[i]), must be retired, oldest first,
 * before [begin, end) can be written: all up to the newest one it overlaps (after a wrap
 * to 0 that need not be the oldest), and at least one if every slot is taken. */
static inline int mk_staging_ring_retire(const size_t *begins, const size_t *ends, int first,
                                    int count, int slots, size_t begin, size_t end) {
    int retire = count == slots ? 1 : 0;
    for (int k = 0; k < count; k++) {
        int i = (first + k) % slots;
        if (begins[i] < end && begin < ends[i]) retire = k + 1;
    }
    return retire;
}
#endif
