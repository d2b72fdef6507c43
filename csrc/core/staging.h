/* Staging: getting host data onto a device without making the copy wait for the compute
 * stream. It is one concept with two rings, and every file and name of it says "staging":
 *   - the batch slots (this file, staging.c, and their bookkeeping staging_slots.h, type
 *     mk_staging): two slots of device memory that whole batches are copied into on a copy
 *     stream, one per step in flight;
 *   - the pinned ring (cuda/staging_ring.cu and its bookkeeping cuda/staging_ring.h): host
 *     memory that every host -> device copy of the CUDA backend passes through, so that
 *     cudaMemcpyAsync never reads pageable memory.
 * A host batch on a GPU goes through both: to_device into its slot, through the ring.
 *
 * The batch slots: host batches copied into one of two slots on a copy stream (double
 * buffering), device batches checked on that stream and used in place.
 *
 * Why: with one batch buffer on the model's stream, the host -> device copy of batch n + 1
 * queues behind step n. With two slots and a second stream the copy of batch n + 1 waits
 * only for step n - 1 (the last reader of its slot) and runs while step n computes; step
 * n + 1 waits for its own copy through an event. The slot bookkeeping is staging_slots.h.
 *
 * Slots are sized for the largest (B, L) seen (each separately, as the arena) and laid
 * out for that capacity, so their addresses do not move with the current batch's shape:
 * a smaller batch never writes where a step still reads. A larger batch reallocates them
 * after synchronising both streams. Only model.c uses this. */
#ifndef MANAKA_STAGING_H
#define MANAKA_STAGING_H

#include "backend.h"
#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mk_staging mk_staging;

/* For a model on `backend` (host_memory = 0) running on `stream`, tokens_per_side T. */
mk_status mk_staging_create(const mk_backend *backend, void *stream, int64_t T,
                                mk_staging **out);
/* Waits for both streams, then frees everything. NULL is a no-op. */
void mk_staging_destroy(mk_staging *stage);

/* mk_batch_check for a batch on the device: the shape checks on the host, the value
 * checks by the backend's batch_check on the copy stream (the host waits for that stream
 * only, not for the steps still running on the model's). Host batches: mk_batch_check. */
mk_status mk_staging_check(mk_staging *stage, const char *op, const mk_batch *batch,
                               int64_t V, int64_t M, int with_targets);

/* Makes `batch` (checked) readable by the work queued next on the model's stream and
 * points *out at it: a host batch's copy in the next slot, or a device batch itself.
 * Whatever it returns, mk_staging_end must follow, after the last work that reads
 * the batch was queued. */
mk_status mk_staging_begin(mk_staging *stage, const mk_batch *batch, mk_batch *out);
/* Marks the end of the step that read the current slot (records its done event). */
mk_status mk_staging_end(mk_staging *stage);

/* The slot the next begin takes, and a host wait for the last step that read it (the
 * binding then releases the device arrays that step read). */
int mk_staging_next_slot(const mk_staging *stage);
mk_status mk_staging_wait_slot(mk_staging *stage, int slot);
/* The copy stream: producers of device batches order their writes before it. */
void *mk_staging_stream(const mk_staging *stage);

#ifdef __cplusplus
}
#endif
#endif
