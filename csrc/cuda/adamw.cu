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
#include "core/adamw_consts.h"
#include "core/bf16.h"
#include "pair_sums.cuh"

/* ------------------------------------------------------------ the update */

/* p *= 1 - lr wd; m, v moving averages of g, g^2; p -= lr / bc1 m / (sqrt(v / bc2) + eps).
 * __fmul_rn/__fadd_rn keep nvcc from contracting into FMAs, so the bits match the CPU's
 * (which compiles cpu/adamw.c with contraction off). */
__device__ __forceinline__ void adamw_update(const mk_adamw_consts &k, float g, float *p,
                                             float *m, float *v) {
    float mi = __fadd_rn(__fmul_rn(k.b1, *m), __fmul_rn(k.c1, g));
    float vi = __fadd_rn(__fmul_rn(k.b2, *v), __fmul_rn(__fmul_rn(k.c2, g), g));
    *m = mi;
    *v = vi;
    float denom = __fadd_rn(__fmul_rn(sqrtf(vi), k.inv_bc2_sqrt), k.eps);
    *p = __fsub_rn(__fmul_rn(*p, k.decay), __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
}

/* The same update with m, v stored as bf16 (backend.h, adamw_bf16): element `i` of the
 * tensor, rounded with mk_rounding_noise(seed, i) exactly as the CPU's bf16 run. */
__device__ __forceinline__ void adamw_update(const mk_adamw_consts &k, float g, float *p,
                                             uint16_t *m, uint16_t *v, uint64_t seed,
                                             int64_t i) {
    float mi = mk_bf16_to_float(*m), vi = mk_bf16_to_float(*v);
    adamw_update(k, g, p, &mi, &vi);
    const uint32_t noise = mk_rounding_noise(seed, (uint64_t)i);
    *m = mk_float_to_bf16_stochastic(mi, noise);
    *v = mk_float_to_bf16_stochastic(vi, noise >> 16);
}

/* fp32 moments take no rounding seed: one signature for the templates below. */
__device__ __forceinline__ void adamw_update(const mk_adamw_consts &k, float g, float *p,
                                             float *m, float *v, uint64_t seed, int64_t i) {
    (void)seed;
    (void)i;
    adamw_update(k, g, p, m, v);
}

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
