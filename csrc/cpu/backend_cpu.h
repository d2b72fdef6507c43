/* The CPU backend: mk_x_cpu implements the entry x of mk_backend, with the prototype
 * core/backend_ops.def gives it (the math is there). Each concern has its own file:
 * backend_cpu.c (memory, streams, the batch check and the table), gemm.c, dense.c, loss.c,
 * gather_dot.c, power_sums.c, pair_sums.c, policy_head.c, adamw.c (every AdamW variant,
 * the fused pair-table updates over pair_groups.c, and scratch_bytes: only those updates
 * and GatherDot's grad_table use `work` on the CPU), pair_sparse.c (the sparse pair-table
 * update). */
#ifndef MANAKA_CPU_BACKEND_H
#define MANAKA_CPU_BACKEND_H
#include "core/backend.h"

#define MK_OP(ret, name, params) ret mk_##name##_cpu params;
#include "core/backend_ops.def"
#undef MK_OP

/* gemm.c: pins OpenBLAS's own thread pool to one thread: GEMMs are split over manaka's
 * OpenMP team instead (gemm.c says why), so mk_set_num_threads governs both. */
void mk_gemm_pin_blas_threads(void);

/* gather_dot.c: the scratch gather_dot_backward's grad_table needs for legal [B, L] out of
 * M moves (its counting sort by table row) */
size_t mk_gather_dot_work_bytes_cpu(int64_t B, int64_t L, int64_t M);

/* adamw.c: the fused updates' check of their scratch (MK_OK, or MK_ERR_VALUE naming `op`) */
mk_status mk_pair_check_work_cpu(const char *op, int64_t rows, int64_t T, int64_t V, void *work,
                                 size_t work_bytes);
#endif
