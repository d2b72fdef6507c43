/* The sparse pair-table update on the GPU (pair_update "sparse" / "lazy"; backend.h's
 * pair_catch_up, pair_sums_backward_adamw_sparse, pair_gap_advance). The arithmetic is
 * core/pair_gap.h's and adamw_update.cuh's, shared with the CPU (cpu/pair_sparse.c), so the
 * two backends give the same bits.
 *
 * Launches of a sparse step (docs/gpu.md lists their bytes beside the dense update's):
 *   pair_catch_up_kernel     one thread per (row, i < j) entry of the batch: a stamp read,
 *                            and for the one thread that claims a row (atomicCAS on its
 *                            stamp) that row's catch-up, P elements of p, m, v;
 *   the pair buckets          (pair_sums.cu: keys, radix sort, starts), as the dense update;
 *   pair_sparse_adamw_kernel one thread per (sorted entry, column): the first entry of each
 *                            row's bucket updates that row's element from its bucket's sum;
 *   pair_gap_advance_kernel  the stamps' gap entries (<= MK_GAP_WINDOW x 40 bytes).
 * A catch-up's result depends only on the row and its gap entry, not on which thread
 * claims it; the update's sums are the dense update's: bitwise deterministic. */
#include "adamw_update.cuh"
#include "backend_cuda.h"
#include "common.cuh"
#include "pair_sums.cuh"

/* ------------------------------------------------------------ catching rows up */

template <typename Moment> struct catch_up_args {
    float *p;
    Moment *m, *v;
    int32_t *stamps;
    const double *gaps;
    int32_t now;
    int drift;
    float eps;
    uint64_t seed;
    int64_t P;
};

__device__ __forceinline__ void catch_up_element(const mk_gap_row &r, float eps, float *p, float *m,
                                                 float *v, uint64_t seed, int64_t i) {
    (void)seed, (void)i;
    mk_gap_apply(&r, eps, p, m, v);
}
__device__ __forceinline__ void catch_up_element(const mk_gap_row &r, float eps, float *p,
                                                 uint16_t *m, uint16_t *v, uint64_t seed,
                                                 int64_t i) {
    float mi = mk_bf16_to_float(*m), vi = mk_bf16_to_float(*v);
    mk_gap_apply(&r, eps, p, &mi, &vi);
    const uint32_t noise = mk_rounding_noise(seed, (uint64_t)i);
    *m = mk_float_to_bf16_stochastic(mi, noise);
    *v = mk_float_to_bf16_stochastic(vi, noise >> 16);
}

/* Row q, whose stamp was s, over its gap. */
template <typename Moment>
__device__ __forceinline__ void catch_up_row(const catch_up_args<Moment> &a, int64_t q, int32_t s) {
    const mk_gap_row r = mk_gap_row_of(a.gaps + (int64_t)s * MK_GAP_FIELDS, a.drift);
    for (int64_t c = 0; c < a.P; c++) {
        const int64_t x = q * a.P + c;
        catch_up_element(r, a.eps, a.p + x, a.m + x, a.v + x, a.seed, x);
    }
}

template <typename Moment>
static __global__ void pair_catch_up_all_kernel(catch_up_args<Moment> a, int64_t num_pairs) {
    MK_GRID_STRIDE(q, num_pairs) {
        const int32_t s = a.stamps[q];
        if (s != a.now) {
            catch_up_row(a, q, s);
            a.stamps[q] = a.now;
        }
    }
}

template <typename Moment>
static __global__ void pair_catch_up_kernel(catch_up_args<Moment> a, const int32_t *tokens,
                                            int64_t rows, int64_t T) {
    const int64_t pairs = T * (T - 1) / 2;
    MK_GRID_STRIDE(e, rows * pairs) {
        int64_t r = e / pairs, i, j;
        pair_of(e % pairs, &i, &j);
        const int32_t ta = tokens[r * T + i], tb = tokens[r * T + j];
        if (ta < 0 || tb < 0) continue;
        const int64_t q = pair_row(ta, tb);
        const int32_t s = a.stamps[q];
        /* the one thread whose swap succeeds owns the row's catch-up */
        if (s != a.now && atomicCAS((int *)(a.stamps + q), (int)s, (int)a.now) == (int)s)
            catch_up_row(a, q, s);
    }
}

template <typename Moment>
static mk_status catch_up(cudaStream_t st, const int32_t *tokens, int64_t rows, int64_t T,
                          int64_t P, int64_t V, float *p, void *m, void *v, int32_t *stamps,
                          const double *gaps, int64_t now, int drift, float eps, uint64_t seed) {
    mk_status status = MK_OK;
    const catch_up_args<Moment> a = {p, (Moment *)m, (Moment *)v, stamps, gaps, (int32_t)now,
                                     drift, eps, seed, P};
    const int64_t num_pairs = mk_num_pairs(V), entries = rows * (T * (T - 1) / 2);
    if (!tokens) {
        if (num_pairs == 0) return MK_OK;
        pair_catch_up_all_kernel<Moment><<<mk_blocks_for(num_pairs, 256), 256, 0, st>>>(a, num_pairs);
        MK_CUDA_LAUNCHED("pair_catch_up_all_kernel");
    } else if (entries > 0) {
        pair_catch_up_kernel<Moment><<<mk_blocks_for(entries, 256), 256, 0, st>>>(a, tokens, rows, T);
        MK_CUDA_LAUNCHED("pair_catch_up_kernel");
    }
done:
    return status;
}

extern "C" mk_status mk_pair_catch_up_cuda(void *stream, const int32_t *tokens, int64_t rows,
                                           int64_t T, int64_t P, int64_t V, float *p, void *m,
                                           void *v, int bf16, int32_t *stamps, const double *gaps,
                                           int64_t now, int drift, float eps, uint64_t seed,
                                           void *work, size_t work_bytes) {
    (void)work, (void)work_bytes; /* one thread per entry, stamps claimed atomically: no buckets */
    cudaStream_t st = MK_STREAM(stream);
    return bf16 ? catch_up<uint16_t>(st, tokens, rows, T, P, V, p, m, v, stamps, gaps, now, drift,
                                     eps, seed)
                : catch_up<float>(st, tokens, rows, T, P, V, p, m, v, stamps, gaps, now, drift,
                                  eps, seed);
}

/* ------------------------------------------------------------ the touched rows' AdamW */

/* Thread (e, c): if sorted entry e is the first of its row's bucket, that row's column c
 * gets AdamW from the bucket's sum (exactly the dense fused update's element), and column 0
 * stamps the row. Entries of empty slots sort last, under key num_pairs. */
template <typename Moment>
static __global__ void pair_sparse_adamw_kernel(const float *__restrict__ grad,
                                                const uint32_t *__restrict__ sorted_keys,
                                                const int32_t *__restrict__ order,
                                                const int32_t *__restrict__ starts, int64_t n,
                                                int64_t num_pairs, int64_t pairs, int64_t P,
                                                float *__restrict__ p, Moment *__restrict__ m,
                                                Moment *__restrict__ v, int32_t *stamps,
                                                int32_t now, mk_adamw_consts k,
                                                const float *__restrict__ stats, uint64_t seed) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    MK_GRID_STRIDE(x, n * P) {
        const int64_t e = x / P, c = x % P;
        const uint32_t key = sorted_keys[e];
        if ((int64_t)key >= num_pairs || (e > 0 && sorted_keys[e - 1] == key)) continue;
        const int64_t el = (int64_t)key * P + c;
        adamw_update(k, mk_pair_grad_element(grad, order, starts, pairs, P, el), p + el, m + el,
                     v + el, seed, el);
        if (c == 0) stamps[key] = now;
    }
}

template <typename Moment>
static mk_status sparse_adamw(const float *grad, const int32_t *tokens, int64_t rows, int64_t T,
                              int64_t P, int64_t V, float *p, void *m, void *v, int32_t *stamps,
                              int64_t now, const mk_adamw_args *args, const float *stats,
                              uint64_t seed, void *work, size_t work_bytes, cudaStream_t s) {
    mk_status status = MK_OK;
    const int64_t pairs = T * (T - 1) / 2, num_pairs = mk_num_pairs(V);
    mk_buckets bk;
    if (num_pairs == 0 || P == 0) return MK_OK;
    if ((status = mk_pair_buckets_cuda("pair_sums_backward_adamw_sparse", tokens, rows, T, P,
                                       num_pairs, work, work_bytes, s, &bk)) != MK_OK)
        return status;
    if (bk.n > 0) {
        pair_sparse_adamw_kernel<Moment><<<mk_blocks_for(bk.n * P, 256), 256, 0, s>>>(
            grad, bk.sorted_keys, bk.order, bk.starts, bk.n, num_pairs, pairs > 0 ? pairs : 1, P, p,
            (Moment *)m, (Moment *)v, stamps, (int32_t)now, mk_adamw_prepare(args), stats, seed);
        MK_CUDA_LAUNCHED("pair_sparse_adamw_kernel");
    }
done:
    return status;
}

extern "C" mk_status mk_pair_sums_backward_adamw_sparse_cuda(
    void *stream, const float *grad, const int32_t *tokens, int64_t rows, int64_t T, int64_t P,
    int64_t V, float *p, void *m, void *v, int bf16, int32_t *stamps, int64_t now,
    const mk_adamw_args *args, const float *stats, uint64_t seed, void *work, size_t work_bytes,
    int bucketed) {
    (void)bucketed; /* the catch-up leaves no buckets here: the tokens are bucketed by key */
    cudaStream_t s = MK_STREAM(stream);
    return bf16 ? sparse_adamw<uint16_t>(grad, tokens, rows, T, P, V, p, m, v, stamps, now, args,
                                         stats, seed, work, work_bytes, s)
                : sparse_adamw<float>(grad, tokens, rows, T, P, V, p, m, v, stamps, now, args,
                                      stats, 0, work, work_bytes, s);
}

/* ------------------------------------------------------------ the gap window */

static __global__ void pair_gap_advance_kernel(double *gaps, int64_t n, mk_gap_step step,
                                               const float *stats) {
    const bool applied = !(stats && stats[MK_STAT_FINITE] == 0.0f);
    MK_GRID_STRIDE(i, n + 1) {
        if (i == n) mk_gap_reset(gaps + i * MK_GAP_FIELDS);
        else if (applied) mk_gap_advance(gaps + i * MK_GAP_FIELDS, &step);
    }
}

extern "C" mk_status mk_pair_gap_advance_cuda(void *stream, double *gaps, int64_t n, double decay,
                                              double step_size, double inv_bc2_sqrt, double beta1,
                                              double sqrt_beta2, const float *stats) {
    mk_status status = MK_OK;
    const mk_gap_step step = {decay, step_size, inv_bc2_sqrt, beta1, sqrt_beta2};
    pair_gap_advance_kernel<<<mk_blocks_for(n + 1, 256), 256, 0, MK_STREAM(stream)>>>(gaps, n, step,
                                                                                    stats);
    MK_CUDA_LAUNCHED("pair_gap_advance_kernel");
done:
    return status;
}
