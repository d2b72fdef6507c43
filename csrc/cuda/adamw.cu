/* AdamW on the GPU, every variant of it in one file: the update of one element (fp32 or
 * bf16 moments), the backend table's adamw and adamw_bf16 over a flat range, and the pair
 * table's fused PairSums backward + AdamW (pair_sums_backward_adamw and its bf16 twin). All
 * run the same device functions, so fused and unfused give the same bits; the constants
 * come from core/adamw_consts.h, shared with the CPU (cpu/adamw.c), and the arithmetic is
 * written without contraction, so the two backends agree bit for bit.
 *
 * Each update is one memory-bound pass (28 bytes moved per parameter with fp32 moments, 20
 * with bf16), launched once per contiguous parameter group (the model's groups: the pair
 * table, the decayed weights, the biases), not once per tensor. Every kernel returns on the
 * device when the step's loss was not finite (stats[MK_STAT_FINITE] == 0), so the host
 * never has to read the loss before applying an update. */
#include "backend_cuda.h"
#include "common.cuh"
#include "adamw_update.cuh"
#include "pair_sums.cuh"

/* ------------------------------------------------------------ adamw, adamw_bf16 */

/* Moment is float, or uint16_t for bf16 moments (pair_state_dtype="bf16"). */
template <typename Moment>
static __global__ void adamw_kernel(float *p, const float *g, Moment *m, Moment *v, int64_t n,
                                    mk_adamw_consts k, const float *stats, uint64_t seed) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    MK_GRID_STRIDE(i, n)
        adamw_update(k, g[i], p + i, m + i, v + i, seed, i);
}

extern "C" mk_status mk_adamw_cuda(void *stream, float *p, const float *g, float *m, float *v,
                                   int64_t n, const mk_adamw_args *args, const float *stats) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    adamw_kernel<float><<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(
        p, g, m, v, n, mk_adamw_prepare(args), stats, 0);
    MK_CUDA_LAUNCHED("adamw_kernel");
done:
    return status;
}

extern "C" mk_status mk_adamw_bf16_cuda(void *stream, float *p, const float *g, uint16_t *m,
                                        uint16_t *v, int64_t n, const mk_adamw_args *args,
                                        const float *stats, uint64_t seed) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    adamw_kernel<uint16_t><<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(
        p, g, m, v, n, mk_adamw_prepare(args), stats, seed);
    MK_CUDA_LAUNCHED("adamw_bf16_kernel");
done:
    return status;
}

/* ------------------------------------------------------------ the fused pair-table update */

/* pair_sums_backward's per-element sum (pair_sums.cuh), consumed at once by AdamW instead
 * of being written: the 176 MB gradient of the seed's pair table is never stored or read
 * back. */
template <typename Moment>
static __global__ void pair_sums_adamw_kernel(const float *__restrict__ grad,
                                              const int32_t *__restrict__ order,
                                              const int32_t *__restrict__ starts,
                                              int64_t num_pairs, int64_t pairs, int64_t P,
                                              float *__restrict__ p, Moment *__restrict__ m,
                                              Moment *__restrict__ v, mk_adamw_consts k,
                                              const float *__restrict__ stats, uint64_t seed) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    MK_GRID_STRIDE(x, num_pairs * P)
        adamw_update(k, mk_pair_grad_element(grad, order, starts, pairs, P, x), p + x, m + x,
                     v + x, seed, x);
}

/* Buckets the (row, pair) entries by table row (pair_sums.cu: stable, so each element's sum
 * has a fixed order), then updates every table element from its sum. The buckets live in
 * `work`, checked before any launch. */
template <typename Moment>
static mk_status pair_sums_adamw(const char *op, const float *grad, const int32_t *tokens,
                                 int64_t rows, int64_t T, int64_t P, int64_t V, float *p,
                                 Moment *m, Moment *v, const mk_adamw_args *args,
                                 const float *stats, uint64_t seed, void *work,
                                 size_t work_bytes, cudaStream_t s) {
    mk_status status = MK_OK;
    const int64_t pairs = T * (T - 1) / 2, num_pairs = mk_num_pairs(V);
    mk_buckets bk;
    if (num_pairs == 0 || P == 0) return MK_OK;
    if ((status = mk_pair_buckets_cuda(op, tokens, rows, T, P, num_pairs, work, work_bytes, s,
                                       &bk)) != MK_OK)
        return status;
    pair_sums_adamw_kernel<Moment><<<mk_blocks_for(num_pairs * P, 256), 256, 0, s>>>(
        grad, bk.order, bk.starts, num_pairs, pairs > 0 ? pairs : 1, P, p, m, v,
        mk_adamw_prepare(args), stats, seed);
    MK_CUDA_LAUNCHED("pair_sums_adamw_kernel");
done:
    return status;
}

/* The backend table's entries (stream first, scratch from the step's arena). */
extern "C" mk_status mk_pair_sums_backward_adamw_cuda(void *stream, const float *grad,
                                                      const int32_t *tokens, int64_t rows,
                                                      int64_t T, int64_t P, int64_t V, float *p,
                                                      float *m, float *v,
                                                      const mk_adamw_args *args,
                                                      const float *stats, void *work,
                                                      size_t work_bytes) {
    return pair_sums_adamw<float>("pair_sums_backward_adamw", grad, tokens, rows, T, P, V, p, m,
                                  v, args, stats, 0, work, work_bytes, MK_STREAM(stream));
}

extern "C" mk_status mk_pair_sums_backward_adamw_bf16_cuda(
    void *stream, const float *grad, const int32_t *tokens, int64_t rows, int64_t T, int64_t P,
    int64_t V, float *p, uint16_t *m, uint16_t *v, const mk_adamw_args *args,
    const float *stats, uint64_t seed, void *work, size_t work_bytes) {
    return pair_sums_adamw<uint16_t>("pair_sums_backward_adamw_bf16", grad, tokens, rows, T, P,
                                     V, p, m, v, args, stats, seed, work, work_bytes,
                                     MK_STREAM(stream));
}
