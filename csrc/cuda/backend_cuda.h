/* The CUDA backend's entries (the table in backend_cuda.cu). Each implements the entry of
 * mk_backend with the same name and contract (core/backend_ops.def holds the math).
 * Pointers are device pointers; `stream` is a cudaStream_t (NULL: the legacy default
 * stream); nothing here synchronises the host except mk_synchronize_cuda, and CUDA
 * failures come back as MK_ERR_RUNTIME with file:line and the CUDA error string. */
#ifndef MANAKA_CUDA_BACKEND_CUDA_H
#define MANAKA_CUDA_BACKEND_CUDA_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const mk_backend mk_backend_cuda;

/* Every entry x of mk_backend is mk_x_cuda, with the prototype backend_ops.def gives it:
 * memory.cu (memory), dense.cu (gemm, bias_act, sigmoid), loss.cu, gather_dot.cu,
 * power_sums.cu, pair_sums.cu, adamw.cu (every AdamW variant), pair_sparse.cu (the sparse
 * pair-table update), pair_rows.cu (the rows a data-parallel step exchanges),
 * policy_head.cu, streams.cu (the batch copy stream and its events),
 * check.cu (batch_check: mk_find_fault_cuda, runtime.h, over mk_batch_rules) and
 * move_pairs.cu (move_pair_sums and its backward), move_pairs_relative.cu (its relative
 * part), move_hidden.cu and move_hidden_backward.cu (MoveHidden) and backend_cuda.cu
 * (scratch_bytes: the largest of the sorts of gather_dot_backward, power_sums_backward,
 * move_pair_sums_backward, move_hidden_backward and the pair-table backward, which run one
 * after another on the step's stream and so share one region). */
#define MK_OP(ret, name, params) ret mk_##name##_cuda params;
#include "core/backend_ops.def"
#undef MK_OP

/* pair_rows.cu: pair_grad_rows carves its row count (one int64 the host reads) from the
 * last bytes of its scratch, after the pair table's buckets: scratch_bytes adds these. */
#define MK_ROWS_WORD_BYTES 64

/* staging_ring.cu: host -> device through a pinned ring, without waiting for the stream */
mk_status mk_cuda_stage_to_device(void *dst, const void *src, size_t bytes, void *stream);

/* The fused ops' backward passes on the caller's scratch (what their entries call when
 * given scratch), stream last: `work` is device memory of at least the _ws_bytes query's
 * bytes, any alignment; with fewer (a NULL `work` included) the call fails with
 * MK_ERR_VALUE before writing anything. Its contents are undefined afterwards. */
mk_status mk_gather_dot_backward_cuda_ws_bytes(int64_t B, int64_t L, int64_t M, size_t *bytes);
mk_status mk_gather_dot_backward_cuda_ws(const float *grad, const float *hidden,
                                         const float *table, const int32_t *indices,
                                         const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                         int64_t M, float *grad_hidden, float *grad_table,
                                         const uint8_t *rows, void *work, size_t work_bytes,
                                         void *stream);
mk_status mk_power_sums_backward_cuda_ws_bytes(int64_t rows, int64_t T, int64_t V, size_t *bytes);
mk_status mk_power_sums_backward_cuda_ws(const float *grad, const float *emb,
                                         const int32_t *tokens, int64_t rows, int64_t T,
                                         int64_t D, int64_t K, int64_t V, float *grad_emb,
                                         void *work, size_t work_bytes, void *stream);
mk_status mk_pair_sums_backward_cuda_ws_bytes(int64_t rows, int64_t T, int64_t num_pairs,
                                              size_t *bytes);
mk_status mk_pair_sums_backward_cuda_ws(const float *grad, const int32_t *tokens, int64_t rows,
                                        int64_t T, int64_t P, int64_t num_pairs,
                                        float *grad_pair_table, void *work, size_t work_bytes,
                                        void *stream);
mk_status mk_move_pair_sums_backward_cuda_ws_bytes(int64_t B, int64_t T, int64_t L, int64_t V,
                                                   size_t *bytes);
mk_status mk_move_pair_sums_backward_cuda_ws(const float *grad, const int32_t *tokens,
                                             int64_t token_stride, const int32_t *legal,
                                             const int32_t *counts, int64_t B, int64_t T,
                                             int64_t L, int64_t V, int64_t C, float *grad_table,
                                             void *work, size_t work_bytes, void *stream);
/* move_hidden_backward_ws also takes less than its query's scratch (down to one position's
 * share): it then sorts the batch in more chunks, with the same bits. */
/* move_hidden.cu, move_hidden_backward.cu: the most units their shared memory takes (a
 * slot's D products and its row index in one block's shared memory). */
#define MK_MOVE_HIDDEN_MAX_D 4096
mk_status mk_move_hidden_backward_cuda_ws_bytes(int64_t B, int64_t T, int64_t L, int64_t D,
                                                size_t *bytes);
mk_status mk_move_hidden_backward_cuda_ws(const float *grad, const float *pre, const float *out,
                                          int64_t out_stride, const int32_t *tokens,
                                          int64_t token_stride,
                                          const int32_t *legal, const int32_t *counts, int64_t B,
                                          int64_t T, int64_t L, int64_t C, int64_t W, int64_t H,
                                          int64_t K, int64_t D, float *grad_relative,
                                          float *grad_class, float *grad_out, void *work,
                                          size_t work_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
