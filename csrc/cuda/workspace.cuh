/* Temporary device memory for the launchers (the bucket sort's buffers, the index checks'
 * result word), stream-ordered so that allocating never waits for the device.
 *
 * It comes from a memory pool manaka creates per device on first use, whose release
 * threshold keeps freed memory for the next call instead of handing it back to the
 * driver at every synchronisation (the default pool's behaviour, which would make each
 * call map fresh pages). The pool holds at most the largest workspace an op has needed
 * (about 40 MB for PairSums' backward at the seed shapes). Where a pool cannot be
 * created, the default pool is used. */
#ifndef MANAKA_CUDA_WORKSPACE_CUH
#define MANAKA_CUDA_WORKSPACE_CUH

#include "common.cuh"

cudaError_t mk_workspace_alloc(void **ptr, size_t bytes, cudaStream_t stream);
cudaError_t mk_workspace_free(void *ptr, cudaStream_t stream);

#endif
