/* Kernel variants kept only so the benchmark (python -m manaka.bench ops, through
 * manaka._cuda's deterministic=False) can compare them with the table's entries:
 * not part of the public C API, and not used by the op table or the training step.
 *
 * Both scatter with atomicAdd instead of grouping by destination row with a stable sort,
 * so their results vary in the last bits from run to run whenever a destination row
 * repeats. Same arguments and contract otherwise as the entry they shadow (they need no
 * scratch: `work` is ignored). */
#ifndef MANAKA_CUDA_BENCH_VARIANTS_H
#define MANAKA_CUDA_BENCH_VARIANTS_H

#include "core/manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

/* mk_gather_dot_backward_cuda, grad_table by atomicAdd into its rows. */
mk_status mk_gather_dot_backward_atomic_cuda(void *stream, const float *grad,
                                             const float *hidden, const float *table,
                                             const int32_t *indices, const int32_t *counts,
                                             int64_t B, int64_t L, int64_t W, int64_t M,
                                             float *grad_hidden, float *grad_table, void *work,
                                             size_t work_bytes);
/* mk_pair_sums_backward_cuda: the table zeroed, then atomicAdd per pair. */
mk_status mk_pair_sums_backward_atomic_cuda(void *stream, const float *grad,
                                            const int32_t *tokens, int64_t rows, int64_t T,
                                            int64_t P, int64_t num_pairs,
                                            float *grad_pair_table, void *work,
                                            size_t work_bytes);

#ifdef __cplusplus
}
#endif
#endif
