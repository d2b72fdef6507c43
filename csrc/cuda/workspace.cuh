/* Temporary device memory for the public ops (mk.ops.* on GPU arrays, which have no arena):
 * the bucket sort's buffers, the index checks' result word. Stream-ordered, so that
 * allocating never waits for the device.
 *
 * It comes from a memory pool manaka creates per device on first use, whose release
 * threshold keeps freed memory for the next call instead of handing it back to the
 * driver at every synchronisation (the default pool's behaviour, which would make each
 * call map fresh pages). The pool holds at most the largest workspace an op has needed
 * (about 50 MB for PairSums' backward at the seed shapes). Where a pool cannot be
 * created, the default pool is used.
 *
 * The training step never comes here: its ops take their scratch from the model's arena
 * (backend.h: scratch_bytes), and each op's launcher takes explicit scratch (pointer and
 * bytes); an entry given no scratch (the public op) only allocates here, calls that
 * launcher, and frees. */
#ifndef MANAKA_CUDA_WORKSPACE_CUH
#define MANAKA_CUDA_WORKSPACE_CUH

#include "common.cuh"

/* *work = `bytes` from the pool (NULL when bytes is 0); mk_work_free releases it and
 * returns `status` if that is an error, else the release's own status. */
mk_status mk_work_alloc(void **work, size_t bytes, cudaStream_t stream);
mk_status mk_work_free(void *work, mk_status status, cudaStream_t stream);

#endif
