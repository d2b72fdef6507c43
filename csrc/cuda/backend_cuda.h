/* The CUDA backend's primitives for the training step (the table in backend_cuda.cu).
 * Each implements the entry of mk_backend (../backend.h) with the same name and contract;
 * the math is documented there once. Pointers are device pointers; `stream` is a
 * cudaStream_t; nothing here synchronises the host except mk_synchronize_cuda. */
#ifndef MANAKA_CUDA_BACKEND_CUDA_H
#define MANAKA_CUDA_BACKEND_CUDA_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const mk_backend mk_backend_cuda;

/* memory.cu */
mk_status mk_alloc_cuda(void *stream, size_t bytes, void **out);
void mk_free_cuda(void *stream, void *ptr);
mk_status mk_to_device_cuda(void *stream, void *dst, const void *src, size_t bytes);
mk_status mk_to_host_cuda(void *stream, void *dst, const void *src, size_t bytes);
mk_status mk_copy_cuda(void *stream, void *dst, const void *src, size_t bytes);
mk_status mk_fill_cuda(void *stream, float *dst, float value, int64_t n);
mk_status mk_fill_uniform_cuda(void *stream, float *dst, int64_t n, float bound, uint64_t seed);
mk_status mk_synchronize_cuda(void *stream);

/* staging_ring.cu: host -> device through a pinned ring, without waiting for the stream */
mk_status mk_cuda_stage_to_device(void *dst, const void *src, size_t bytes, void *stream);

/* dense.cu */
mk_status mk_gemm_cuda(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc);
mk_status mk_bias_act_cuda(void *stream, float *y, const float *bias, int64_t rows, int64_t cols,
                           int relu);
mk_status mk_bias_act_backward_cuda(void *stream, float *dy, const float *y, int64_t rows,
                                    int64_t cols, int relu, float *dbias);
mk_status mk_sigmoid_cuda(void *stream, const float *x, int64_t n, float *out);

/* loss.cu */
mk_status mk_softmax_xent_cuda(void *stream, const float *logits, const int32_t *counts,
                               const int32_t *target, const float *soft, int64_t B, int64_t L,
                               float grad_scale, float *dlogits, float *row_loss,
                               float *row_correct);
mk_status mk_value_bce_cuda(void *stream, const float *z, const float *t, int64_t B,
                            float grad_scale, float *dz, float *row_loss);
mk_status mk_loss_stats_cuda(void *stream, const float *row_policy, const float *row_value,
                             const float *row_correct, int64_t B, float value_weight,
                             float *stats);

/* adamw.cu: every AdamW variant (flat, and the fused PairSums backward + AdamW of the pair
 * table), with fp32 moments ... */
mk_status mk_adamw_cuda(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                        const mk_adamw_args *args, const float *stats);
mk_status mk_pair_sums_backward_adamw_cuda(void *stream, const float *grad,
                                           const int32_t *tokens, int64_t rows, int64_t T,
                                           int64_t P, int64_t V, float *p, float *m, float *v,
                                           const mk_adamw_args *args, const float *stats,
                                           void *work, size_t work_bytes);
/* ... and the same two with bf16 moments */
mk_status mk_adamw_bf16_cuda(void *stream, float *p, const float *g, uint16_t *m, uint16_t *v,
                             int64_t n, const mk_adamw_args *args, const float *stats,
                             uint64_t seed);
mk_status mk_pair_sums_backward_adamw_bf16_cuda(void *stream, const float *grad,
                                                const int32_t *tokens, int64_t rows, int64_t T,
                                                int64_t P, int64_t V, float *p, uint16_t *m,
                                                uint16_t *v, const mk_adamw_args *args,
                                                const float *stats, uint64_t seed, void *work,
                                                size_t work_bytes);

/* pair_sparse.cu: the sparse pair-table update (backend.h) */
mk_status mk_pair_catch_up_cuda(void *stream, const int32_t *tokens, int64_t rows, int64_t T,
                                int64_t P, int64_t V, float *p, void *m, void *v, int bf16,
                                int32_t *stamps, const double *gaps, int64_t now, int drift,
                                float eps, uint64_t seed);
mk_status mk_pair_sums_backward_adamw_sparse_cuda(void *stream, const float *grad,
                                                  const int32_t *tokens, int64_t rows, int64_t T,
                                                  int64_t P, int64_t V, float *p, void *m,
                                                  void *v, int bf16, int32_t *stamps,
                                                  int64_t now, const mk_adamw_args *args,
                                                  const float *stats, uint64_t seed, void *work,
                                                  size_t work_bytes);
mk_status mk_pair_gap_advance_cuda(void *stream, double *gaps, int64_t n, double decay,
                                   double step_size, double inv_bc2_sqrt, double beta1,
                                   double sqrt_beta2, const float *stats);

/* backend_cuda.cu: the scratch a training step's ops need (the largest of the bucket
 * sorts of gather_dot_backward, power_sums_backward and the pair-table backward, which
 * run one after another on the step's stream and so share one region). */
mk_status mk_scratch_bytes_cuda(const mk_step_shapes *shapes, size_t *bytes);

/* policy_head.cu: the fused policy head */
mk_status mk_policy_head_cuda(void *stream, const float *q, const float *table,
                              const int32_t *legal, const int32_t *counts, const int32_t *target,
                              const float *soft, int64_t B, int64_t L, int64_t W,
                              float grad_scale, float *dlogits, float *dq, float *row_loss,
                              float *row_correct);
/* streams.cu: the batch copy stream and its events */
mk_status mk_stream_create_cuda(void **out);
void mk_stream_destroy_cuda(void *stream);
mk_status mk_event_create_cuda(void **out);
void mk_event_destroy_cuda(void *event);
mk_status mk_event_record_cuda(void *stream, void *event);
mk_status mk_stream_wait_event_cuda(void *stream, void *event);
mk_status mk_event_synchronize_cuda(void *event);
/* check.cu: mk_find_fault_cuda (runtime.h) over mk_batch_rules */
mk_status mk_batch_check_cuda(void *stream, const mk_batch *batch, int64_t V, int64_t M,
                              int with_targets, mk_fault *fault, void *work,
                              size_t work_bytes);

#ifdef __cplusplus
}
#endif
#endif
