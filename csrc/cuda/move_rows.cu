/* The sparse move-table update on the GPU (move_update "sparse" / "lazy"; backend_ops.def's
 * move_rows_catch_up and move_rows_adamw): the CPU's cpu/move_rows.c, the same bits.
 *
 * The batch's labels are marked in a byte mask (one thread per legal slot; a row named
 * twice gets the same 1 twice, which is deterministic), then one block per row at a time
 * walks the table: a block whose row is not marked (or already caught up) does nothing
 * else. The element arithmetic is core/pair_gap.h's catch-up and adamw_update.cuh's
 * update, in the CPU's order of operations. The marked rows are not compacted, so no
 * count has to come back to the host: a step stays asynchronous. */
#include "adamw_update.cuh"
#include "backend_cuda.h"
#include "common.cuh"

#define ROW_THREADS 64
#define ROW_BLOCKS 8192

static __global__ void move_rows_mark_kernel(const int32_t *__restrict__ legal,
                                             const int32_t *__restrict__ counts, int64_t B,
                                             int64_t L, uint8_t *mask) {
    MK_GRID_STRIDE(x, B * L) {
        const int64_t b = x / L, l = x % L;
        if (l < (counts ? counts[b] : L)) mask[legal[x]] = 1;
    }
}

/* Every thread of the block reads the row's stamp before thread 0 replaces it (the
 * barrier), so the decision is the same for the whole block. */
static __global__ void move_rows_catch_up_kernel(const uint8_t *__restrict__ mask, int64_t rows,
                                                 int64_t P, float *p, float *m, float *v,
                                                 int32_t *stamps, const double *gaps, int32_t now,
                                                 int drift, float eps) {
    for (int64_t q = blockIdx.x; q < rows; q += gridDim.x) {
        const int32_t s = stamps[q];
        const bool go = (!mask || mask[q]) && s != now;
        if (go) {
            const mk_gap_row r = mk_gap_row_of(gaps + (int64_t)s * MK_GAP_FIELDS, drift);
            for (int64_t c = threadIdx.x; c < P; c += blockDim.x) {
                const int64_t x = q * P + c;
                mk_gap_apply(&r, eps, p + x, m + x, v + x);
            }
        }
        __syncthreads();
        if (go && threadIdx.x == 0) stamps[q] = now;
    }
}

static __global__ void move_rows_adamw_kernel(const uint8_t *__restrict__ mask, int64_t rows,
                                              int64_t P, float *p, const float *__restrict__ grad,
                                              float *m, float *v, int32_t *stamps, int32_t now,
                                              mk_adamw_consts k, const float *stats) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    for (int64_t q = blockIdx.x; q < rows; q += gridDim.x) {
        if (!mask[q]) continue; /* the same for every thread of the block */
        for (int64_t c = threadIdx.x; c < P; c += blockDim.x) {
            const int64_t x = q * P + c;
            adamw_update(k, grad[x], p + x, m + x, v + x);
        }
        if (threadIdx.x == 0) stamps[q] = now;
    }
}

static unsigned int row_blocks(int64_t rows) {
    return (unsigned int)(rows < ROW_BLOCKS ? (rows > 0 ? rows : 1) : ROW_BLOCKS);
}

extern "C" mk_status mk_move_rows_catch_up_cuda(void *stream, const int32_t *legal,
                                                const int32_t *counts, int64_t B, int64_t L,
                                                int64_t rows, int64_t P, float *p, float *m,
                                                float *v, int32_t *stamps, const double *gaps,
                                                int64_t now, int drift, float eps,
                                                uint8_t *mask) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    if (rows == 0) return MK_OK;
    if (legal) {
        MK_CUDA_TRY(cudaMemsetAsync(mask, 0, (size_t)rows, s));
        if (B * L > 0) {
            move_rows_mark_kernel<<<mk_blocks_for(B * L, 256), 256, 0, s>>>(legal, counts, B, L,
                                                                           mask);
            MK_CUDA_LAUNCHED("move_rows_mark_kernel");
        }
    }
    move_rows_catch_up_kernel<<<row_blocks(rows), ROW_THREADS, 0, s>>>(
        legal ? mask : NULL, rows, P, p, m, v, stamps, gaps, (int32_t)now, drift, eps);
    MK_CUDA_LAUNCHED("move_rows_catch_up_kernel");
done:
    return status;
}

extern "C" mk_status mk_move_rows_adamw_cuda(void *stream, const uint8_t *mask, int64_t rows,
                                             int64_t P, float *p, const float *grad, float *m,
                                             float *v, int32_t *stamps, int64_t now,
                                             const mk_adamw_args *args, const float *stats) {
    mk_status status = MK_OK;
    if (rows == 0) return MK_OK;
    move_rows_adamw_kernel<<<row_blocks(rows), ROW_THREADS, 0, MK_STREAM(stream)>>>(
        mask, rows, P, p, grad, m, v, stamps, (int32_t)now, mk_adamw_prepare(args), stats);
    MK_CUDA_LAUNCHED("move_rows_adamw_kernel");
done:
    return status;
}
