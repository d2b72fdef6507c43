/* Host-to-device copies through pinned staging memory.
 *
 * Why: cudaMemcpyAsync from pageable memory may synchronise with the stream while the
 * driver stages the bytes, so copying a batch would wait for the previous step to finish.
 * Copying the batch into pinned memory first (a host memcpy of a few MB) and DMA-ing from
 * there never waits: the host queues step n + 1 while the GPU still runs step n.
 *
 * The staging memory is one pinned ring (64 MB, allocated on first use) shared by every
 * stream of the process, like the CUDA context it belongs to. A copy takes the next
 * contiguous region; before a region is reused, the event recorded after the copies that
 * last used it is waited for (with a ring many batches long, it has long completed). The
 * events are made once per slot and reused: no CUDA object is created per copy. An event
 * can only be recorded on a stream of the device it was made on, and the ring serves every
 * device of the process (pinned memory is portable under unified addressing), so a slot's
 * event is made again when a copy for another device takes the slot.
 * Larger copies (loading a checkpoint's 176 MB pair table) go through the ring in pieces,
 * never straight from the caller's memory: from pinned memory (the NumPy view of a torch
 * pin_memory tensor, say) cudaMemcpyAsync is asynchronous, and a batch's copy waits on the
 * copy stream for the step before, so it would read the source after the caller reused it. */
#include <mutex>
#include <string.h>

#include "backend_cuda.h"
#include "common.cuh"
#include "staging_ring.h"

#define STAGING_BYTES ((size_t)64 << 20)
#define STAGING_REGIONS 64 /* copies in flight the ring tracks */
#define STAGING_PIECE (STAGING_BYTES / 4) /* the most one region holds */

namespace {
struct staging_ring {
    std::mutex lock;
    char *memory = nullptr;
    size_t head = 0;
    /* circular queue of the regions in flight, oldest first, and their copies' events */
    size_t begins[STAGING_REGIONS], ends[STAGING_REGIONS];
    cudaEvent_t done[STAGING_REGIONS];
    int done_device[STAGING_REGIONS]; /* the device done[k] was made on (when made) */
    int first = 0, count = 0;
};
staging_ring ring;

/* Waits for (and forgets) the regions staging_ring.h says must finish before
 * [begin, end) is written, oldest first. */
cudaError_t reclaim(size_t begin, size_t end) {
    int retire = mk_staging_ring_retire(ring.begins, ring.ends, ring.first, ring.count,
                                   STAGING_REGIONS, begin, end);
    for (; retire > 0; retire--) {
        cudaError_t err = cudaEventSynchronize(ring.done[ring.first]);
        if (err != cudaSuccess) return err;
        ring.first = (ring.first + 1) % STAGING_REGIONS;
        ring.count--;
    }
    return cudaSuccess;
}

/* done[slot] (a free slot: its last copy was retired, so completed), made for the current
 * device, where the copy's stream lives. */
cudaError_t slot_event(int slot, cudaEvent_t *out) {
    int device;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (!ring.done[slot] || ring.done_device[slot] != device) {
        if (ring.done[slot]) (void)cudaEventDestroy(ring.done[slot]);
        ring.done[slot] = nullptr;
        if ((err = cudaEventCreateWithFlags(&ring.done[slot], cudaEventDisableTiming)) != cudaSuccess)
            return err;
        ring.done_device[slot] = device;
    }
    *out = ring.done[slot];
    return cudaSuccess;
}

/* One piece (at most STAGING_PIECE bytes) into the ring and on to dst; ring.lock held. */
mk_status stage_piece(void *dst, const void *src, size_t bytes, cudaStream_t s) {
    size_t begin = mk_staging_ring_place(ring.head, bytes, STAGING_BYTES);
    MK_CUDA_RETURN_IF(reclaim(begin, begin + bytes));
    int slot = (ring.first + ring.count) % STAGING_REGIONS; /* free: reclaim made room */
    cudaEvent_t done;
    MK_CUDA_RETURN_IF(slot_event(slot, &done));
    memcpy(ring.memory + begin, src, bytes);
    cudaError_t err = cudaMemcpyAsync(dst, ring.memory + begin, bytes, cudaMemcpyHostToDevice, s);
    if (err == cudaSuccess) err = cudaEventRecord(done, s);
    if (err != cudaSuccess) return mk_cuda_error(err, "staged cudaMemcpyAsync", __FILE__, __LINE__);
    ring.begins[slot] = begin;
    ring.ends[slot] = begin + bytes;
    ring.count++;
    ring.head = begin + bytes;
    return MK_OK;
}
}  // namespace

extern "C" mk_status mk_cuda_stage_to_device(void *dst, const void *src, size_t bytes,
                                             void *stream) {
    std::lock_guard<std::mutex> guard(ring.lock);
    if (!ring.memory) MK_CUDA_RETURN_IF(cudaHostAlloc((void **)&ring.memory, STAGING_BYTES, 0));
    for (size_t at = 0; at < bytes; at += STAGING_PIECE) {
        const size_t n = bytes - at < STAGING_PIECE ? bytes - at : STAGING_PIECE;
        mk_status status = stage_piece((char *)dst + at, (const char *)src + at, n, MK_STREAM(stream));
        if (status != MK_OK) return status;
    }
    return MK_OK;
}
