/* The CPU implementations of the mk_backend primitives (backend.h gives each one's math).
 * Each concern has its own file: backend_cpu.c (memory and the table), gemm.c, dense.c,
 * loss.c, adamw.c, policy_head.c; the fused ops are the mk_*_cpu functions of manaka.h. */
#ifndef MANAKA_CPU_BACKEND_H
#define MANAKA_CPU_BACKEND_H
#include "core/backend.h"

/* gemm.c: OpenBLAS sgemm (scipy-openblas32) */
mk_status mk_gemm_cpu(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc);
/* Pins OpenBLAS's own thread pool to one thread: GEMMs are split over manaka's OpenMP
 * team instead (gemm.c says why), so mk_set_num_threads governs both. */
void mk_gemm_pin_blas_threads(void);

/* dense.c */
mk_status mk_bias_act_cpu(void *stream, float *y, const float *bias, int64_t rows, int64_t cols,
                          int relu);
mk_status mk_bias_act_backward_cpu(void *stream, float *dy, const float *y, int64_t rows,
                                   int64_t cols, int relu, float *dbias);
mk_status mk_sigmoid_cpu(void *stream, const float *x, int64_t n, float *out);

/* loss.c */
mk_status mk_softmax_xent_cpu(void *stream, const float *logits, const int32_t *counts,
                              const int32_t *target, const float *soft, int64_t B, int64_t L,
                              float grad_scale, float *dlogits, float *row_loss,
                              float *row_correct);
mk_status mk_value_bce_cpu(void *stream, const float *z, const float *t, int64_t B,
                           float grad_scale, float *dz, float *row_loss);
mk_status mk_loss_stats_cpu(void *stream, const float *row_policy, const float *row_value,
                            const float *row_correct, int64_t B, float value_weight,
                            float *stats);

/* adamw.c: every AdamW variant (flat fp32 and bf16 moments, the fused pair-table update
 * over pair_groups.c) */
mk_status mk_adamw_cpu(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                       const mk_adamw_args *args, const float *stats);
mk_status mk_adamw_bf16_cpu(void *stream, float *p, const float *g, uint16_t *m, uint16_t *v,
                            int64_t n, const mk_adamw_args *args, const float *stats,
                            uint64_t seed);
mk_status mk_pair_sums_backward_adamw_cpu(void *stream, const float *grad, const int32_t *tokens,
                                          int64_t rows, int64_t T, int64_t P, int64_t V,
                                          float *p, float *m, float *v,
                                          const mk_adamw_args *args, const float *stats,
                                          void *work, size_t work_bytes);
mk_status mk_pair_sums_backward_adamw_bf16_cpu(void *stream, const float *grad,
                                               const int32_t *tokens, int64_t rows, int64_t T,
                                               int64_t P, int64_t V, float *p, uint16_t *m,
                                               uint16_t *v, const mk_adamw_args *args,
                                               const float *stats, uint64_t seed,
                                               void *work, size_t work_bytes);

/* adamw.c: the fused updates' check of their scratch (MK_OK, or MK_ERR_VALUE naming `op`) */
mk_status mk_pair_check_work_cpu(const char *op, int64_t rows, int64_t T, int64_t V, void *work,
                                 size_t work_bytes);
/* pair_sparse.c: the sparse pair-table update (backend.h) */
mk_status mk_pair_catch_up_cpu(void *stream, const int32_t *tokens, int64_t rows, int64_t T,
                               int64_t P, int64_t V, float *p, void *m, void *v, int bf16,
                               int32_t *stamps, const double *gaps, int64_t now, int drift,
                               float eps, uint64_t seed);
mk_status mk_pair_sums_backward_adamw_sparse_cpu(void *stream, const float *grad,
                                                 const int32_t *tokens, int64_t rows, int64_t T,
                                                 int64_t P, int64_t V, float *p, void *m,
                                                 void *v, int bf16, int32_t *stamps,
                                                 int64_t now, const mk_adamw_args *args,
                                                 const float *stats, uint64_t seed, void *work,
                                                 size_t work_bytes);
mk_status mk_pair_gap_advance_cpu(void *stream, double *gaps, int64_t n, double decay,
                                  double step_size, double inv_bc2_sqrt, double beta1,
                                  double sqrt_beta2, const float *stats);

/* policy_head.c */
mk_status mk_policy_head_cpu(void *stream, const float *q, const float *table,
                             const int32_t *legal, const int32_t *counts, const int32_t *target,
                             const float *soft, int64_t B, int64_t L, int64_t W,
                             float grad_scale, float *dlogits, float *dq, float *row_loss,
                             float *row_correct);
/* adamw.c: the table's scratch_bytes (only the fused pair-table updates use `work` on
 * the CPU). */
mk_status mk_scratch_bytes_cpu(const mk_step_shapes *shapes, size_t *bytes);
#endif
