/* The pair table's rows for a data-parallel exchange on the GPU (backend.h's
 * pair_grad_rows, pair_rows_scatter, pair_rows_adamw; core/trainer.c's two-halves step).
 *
 * pair_grad_rows reuses the deterministic PairSums backward's buckets (pair_sums.cu): the
 * (row, i < j) entries sorted by table row, stably. The distinct rows are the first entries
 * of each key in sorted order, ascending; one block numbers them (each thread counts the
 * firsts of its run of entries, a block scan gives each run its first position) and writes
 * their ids, and a second launch writes each listed row's gradient with the same sum as
 * pair_sums_backward (mk_pair_grad_element): the same bits, no float atomics. The count
 * goes to the host through a word carved from the end of the scratch (scratch_bytes
 * reserves MK_ROWS_WORD_BYTES for it beside the buckets).
 *
 * pair_rows_adamw runs adamw_update.cuh's element update (and pair_sparse.cu's catch-up
 * math, core/pair_gap.h) on the listed rows only: the same bits as the CPU's. */
#include "adamw_update.cuh"
#include "backend_cuda.h"
#include "common.cuh"
#include "pair_sums.cuh"

#define ROWS_THREADS 1024

/* Entry e of the sorted keys is the first of its row (and not an ignored entry). */
__device__ __forceinline__ bool first_of_row(const uint32_t *keys, int64_t e, int64_t num_pairs) {
    const uint32_t k = keys[e];
    return (int64_t)k < num_pairs && (e == 0 || keys[e - 1] != k);
}

/* One block: *count = the distinct rows; if that is <= capacity, ids[] the rows, ascending. */
static __global__ void pair_rows_number_kernel(const uint32_t *__restrict__ keys, int64_t n,
                                               int64_t num_pairs, int64_t *ids, int64_t capacity,
                                               int64_t *count) {
    __shared__ int64_t at[ROWS_THREADS + 1];
    const int64_t run = (n + ROWS_THREADS - 1) / ROWS_THREADS;
    const int64_t lo = threadIdx.x * run, hi = lo + run < n ? lo + run : n;
    int64_t mine = 0;
    for (int64_t e = lo; e < hi; e++) mine += first_of_row(keys, e, num_pairs);
    at[threadIdx.x + 1] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        at[0] = 0;
        for (int t = 1; t <= ROWS_THREADS; t++) at[t] += at[t - 1];
        *count = at[ROWS_THREADS];
    }
    __syncthreads();
    if (at[ROWS_THREADS] > capacity) return;
    int64_t pos = at[threadIdx.x];
    for (int64_t e = lo; e < hi; e++)
        if (first_of_row(keys, e, num_pairs)) ids[pos++] = keys[e];
}

static __global__ void pair_rows_gradient_kernel(const float *__restrict__ grad,
                                                 const int32_t *__restrict__ order,
                                                 const int32_t *__restrict__ starts,
                                                 const int64_t *__restrict__ ids, int64_t n,
                                                 int64_t pairs, int64_t P, float *out) {
    MK_GRID_STRIDE(x, n * P) {
        const int64_t i = x / P, c = x % P;
        out[x] = mk_pair_grad_element(grad, order, starts, pairs, P, ids[i] * P + c);
    }
}

static mk_status grad_rows(const float *grad, const int32_t *tokens, int64_t rows, int64_t T,
                           int64_t P, int64_t V, int64_t *ids, float *out, int64_t capacity,
                           int64_t *count, void *work, size_t work_bytes, cudaStream_t s) {
    mk_status status = MK_OK;
    const int64_t pairs = T * (T - 1) / 2, num_pairs = mk_num_pairs(V);
    mk_buckets bk;
    if (work_bytes < MK_ROWS_WORD_BYTES)
        return mk_fail(MK_ERR_VALUE, "pair_grad_rows: the scratch given holds %zu bytes, less "
                                     "than its count word", work_bytes);
    int64_t *word = (int64_t *)(((uintptr_t)work + work_bytes - sizeof(int64_t)) /
                                sizeof(int64_t) * sizeof(int64_t));
    if ((status = mk_pair_buckets_cuda("pair_grad_rows", tokens, rows, T, P, num_pairs, work,
                                       work_bytes - MK_ROWS_WORD_BYTES, s, &bk)) != MK_OK)
        return status;
    pair_rows_number_kernel<<<1, ROWS_THREADS, 0, s>>>(bk.sorted_keys, bk.n, num_pairs, ids,
                                                       capacity, word);
    MK_CUDA_LAUNCHED("pair_rows_number_kernel");
    MK_CUDA_TRY(cudaMemcpyAsync(count, word, sizeof *count, cudaMemcpyDeviceToHost, s));
    MK_CUDA_TRY(cudaStreamSynchronize(s));
    if (*count > 0 && *count <= capacity) {
        pair_rows_gradient_kernel<<<mk_blocks_for(*count * P, 256), 256, 0, s>>>(
            grad, bk.order, bk.starts, ids, *count, pairs > 0 ? pairs : 1, P, out);
        MK_CUDA_LAUNCHED("pair_rows_gradient_kernel");
    }
done:
    return status;
}

extern "C" mk_status mk_pair_grad_rows_cuda(void *stream, const float *grad, const int32_t *tokens,
                                            int64_t rows, int64_t T, int64_t P, int64_t V,
                                            int64_t *ids, float *out, int64_t capacity,
                                            int64_t *count, void *work, size_t work_bytes) {
    cudaStream_t s = MK_STREAM(stream);
    *count = 0;
    if (mk_num_pairs(V) == 0 || P == 0) return MK_OK;
    if (work || work_bytes)
        return grad_rows(grad, tokens, rows, T, P, V, ids, out, capacity, count, work, work_bytes, s);
    size_t bytes = 0;
    mk_status status = mk_pair_sums_backward_cuda_ws_bytes(rows, T, mk_num_pairs(V), &bytes);
    bytes += MK_ROWS_WORD_BYTES;
    if (status == MK_OK) status = mk_work_alloc(&work, bytes, s);
    if (status != MK_OK) return status;
    status = grad_rows(grad, tokens, rows, T, P, V, ids, out, capacity, count, work, bytes, s);
    return mk_work_free(work, status, s);
}

/* ------------------------------------------------------------ scatter */

static __global__ void pair_rows_scatter_kernel(const int64_t *__restrict__ ids,
                                                const float *__restrict__ src, int64_t n, int64_t P,
                                                float *dst) {
    MK_GRID_STRIDE(x, n * P) dst[ids[x / P] * P + x % P] = src[x];
}

extern "C" mk_status mk_pair_rows_scatter_cuda(void *stream, const int64_t *ids, const float *src,
                                               int64_t n, int64_t P, float *dst) {
    mk_status status = MK_OK;
    if (n * P == 0) return MK_OK;
    pair_rows_scatter_kernel<<<mk_blocks_for(n * P, 256), 256, 0, MK_STREAM(stream)>>>(ids, src, n,
                                                                                      P, dst);
    MK_CUDA_LAUNCHED("pair_rows_scatter_kernel");
done:
    return status;
}

/* ------------------------------------------------------------ the listed rows' AdamW */

__device__ __forceinline__ void catch_up_one(const mk_gap_row &r, float eps, float *p, float *m,
                                             float *v, uint64_t seed, int64_t i) {
    (void)seed, (void)i;
    mk_gap_apply(&r, eps, p, m, v);
}
__device__ __forceinline__ void catch_up_one(const mk_gap_row &r, float eps, float *p,
                                             uint16_t *m, uint16_t *v, uint64_t seed, int64_t i) {
    float mi = mk_bf16_to_float(*m), vi = mk_bf16_to_float(*v);
    mk_gap_apply(&r, eps, p, &mi, &vi);
    const uint32_t noise = mk_rounding_noise(seed, (uint64_t)i);
    *m = mk_float_to_bf16_stochastic(mi, noise);
    *v = mk_float_to_bf16_stochastic(vi, noise >> 16);
}

/* One thread per listed row (its P elements in order, as the catch-up reads the stamp once
 * and writes it after the row). */
template <typename Moment>
static __global__ void pair_rows_adamw_kernel(const int64_t *__restrict__ ids,
                                              const float *__restrict__ grad, int64_t n, int64_t P,
                                              float *p, Moment *m, Moment *v, int32_t *stamps,
                                              const double *gaps, int32_t now, int drift, float eps,
                                              uint64_t catch_up_seed, mk_adamw_consts k,
                                              const float *stats, uint64_t seed) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    MK_GRID_STRIDE(i, n) {
        const int64_t q = ids[i];
        if (stamps && stamps[q] != now - 1) {
            const mk_gap_row r = mk_gap_row_of(gaps + (int64_t)stamps[q] * MK_GAP_FIELDS, drift);
            for (int64_t c = 0; c < P; c++) {
                const int64_t x = q * P + c;
                catch_up_one(r, eps, p + x, m + x, v + x, catch_up_seed, x);
            }
        }
        for (int64_t c = 0; c < P; c++) {
            const int64_t x = q * P + c;
            adamw_update(k, grad[i * P + c], p + x, m + x, v + x, seed, x);
        }
        if (stamps) stamps[q] = now;
    }
}

extern "C" mk_status mk_pair_rows_adamw_cuda(void *stream, const int64_t *ids, const float *grad,
                                             int64_t n, int64_t P, float *p, void *m, void *v,
                                             int bf16, int32_t *stamps, const double *gaps,
                                             int64_t now, int drift, float eps,
                                             uint64_t catch_up_seed, const mk_adamw_args *args,
                                             const float *stats, uint64_t seed) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const mk_adamw_consts k = mk_adamw_prepare(args);
    if (n == 0) return MK_OK;
    if (bf16)
        pair_rows_adamw_kernel<uint16_t><<<mk_blocks_for(n, 256), 256, 0, s>>>(
            ids, grad, n, P, p, (uint16_t *)m, (uint16_t *)v, stamps, gaps, (int32_t)now, drift, eps,
            catch_up_seed, k, stats, seed);
    else
        pair_rows_adamw_kernel<float><<<mk_blocks_for(n, 256), 256, 0, s>>>(
            ids, grad, n, P, p, (float *)m, (float *)v, stamps, gaps, (int32_t)now, drift, eps,
            catch_up_seed, k, stats, seed);
    MK_CUDA_LAUNCHED("pair_rows_adamw_kernel");
done:
    return status;
}
