/* PowerSums on the GPU (math: core/backend_ops.def). Contract:
 *   emb [V, D] f32, tokens [rows, T] i32 in [-1, V) (-1 = empty, checked by the caller),
 *   out / grad [rows, K, D] f32, grad_emb [V, D] f32.
 *
 * Forward: one block per row, threads own columns d; one sweep over the row's tokens
 * accumulates all K powers in registers (K <= 8; larger K takes a loop that recomputes
 * the powers with the same multiplications), and writes only the reduced [K, D].
 *
 * Backward (deterministic): token occurrences are grouped by vocabulary row (bucket.cuh,
 * stable), then one block per row v sums, over its occurrences in ascending (row, t),
 * sum_k (k + 1) G[row, k, :] emb[v, :]^k by Horner's rule, the K terms fused per gathered
 * row. The CPU version gets the same determinism by giving each thread a range of rows. */
#include "backend_cuda.h"
#include "bucket.cuh"

template <int K>
static __global__ void power_sums_forward_kernel(const float *__restrict__ emb,
                                                 const int32_t *__restrict__ tokens, int64_t T,
                                                 int D, float *__restrict__ out) {
    const int64_t r = blockIdx.x;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc[K];
#pragma unroll
        for (int k = 0; k < K; k++) acc[k] = 0.0f;
        for (int64_t t = 0; t < T; t++) {
            const int32_t v = tokens[r * T + t];
            if (v < 0) continue;
            const float e = __ldg(emb + (int64_t)v * D + d);
            float p = e;
#pragma unroll
            for (int k = 0; k < K; k++) {
                acc[k] += p;
                p *= e;
            }
        }
#pragma unroll
        for (int k = 0; k < K; k++) out[(r * K + k) * D + d] = acc[k];
    }
}

/* Any K: one pass per order, e^(k+1) by the same k multiplications as above. */
static __global__ void power_sums_forward_any_k_kernel(const float *__restrict__ emb,
                                                       const int32_t *__restrict__ tokens,
                                                       int64_t T, int D, int K,
                                                       float *__restrict__ out) {
    const int64_t r = blockIdx.x;
    for (int d = threadIdx.x; d < D; d += blockDim.x)
        for (int k = 0; k < K; k++) {
            float acc = 0.0f;
            for (int64_t t = 0; t < T; t++) {
                const int32_t v = tokens[r * T + t];
                if (v < 0) continue;
                const float e = __ldg(emb + (int64_t)v * D + d);
                float p = e;
                for (int j = 0; j < k; j++) p *= e;
                acc += p;
            }
            out[(r * K + k) * D + d] = acc;
        }
}

static __global__ void power_sums_keys_kernel(const int32_t *__restrict__ tokens, int64_t n,
                                              int32_t V, uint32_t *keys) {
    MK_GRID_STRIDE(p, n)
        keys[p] = tokens[p] >= 0 ? (uint32_t)tokens[p] : (uint32_t)V;
}

static __global__ void power_sums_grad_emb_kernel(const float *__restrict__ grad,
                                                  const float *__restrict__ emb,
                                                  const int32_t *__restrict__ order,
                                                  const int32_t *__restrict__ starts, int64_t V,
                                                  int64_t T, int D, int K,
                                                  float *__restrict__ grad_emb) {
    for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
        const int32_t begin = starts[v], end = starts[v + 1];
        for (int d = threadIdx.x; d < D; d += blockDim.x) {
            const float e = emb[v * D + d];
            float acc = 0.0f;
            for (int32_t j = begin; j < end; j++) {
                const float *g = grad + (order[j] / T) * K * D + d;
                float h = (float)K * g[(int64_t)(K - 1) * D];
                for (int k = K - 2; k >= 0; k--) h = h * e + (float)(k + 1) * g[(int64_t)k * D];
                acc += h;
            }
            grad_emb[v * D + d] = acc;
        }
    }
}

extern "C" mk_status mk_power_sums_cuda(void *stream, const float *emb, const int32_t *tokens,
                                        int64_t rows, int64_t T, int64_t D, int64_t K,
                                        float *out) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const int threads = mk_column_threads(D, 32, 256);
    if (rows == 0 || D == 0 || K == 0) return MK_OK;
    if (rows > INT32_MAX || D > INT32_MAX || K > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "power_sums: rows, D and K must be below 2^31 on the GPU");
    switch (K) {
#define PS_CASE(k)                                                                          \
    case k:                                                                                 \
        power_sums_forward_kernel<k><<<(unsigned)rows, threads, 0, s>>>(emb, tokens, T,     \
                                                                       (int)D, out);        \
        break;
        PS_CASE(1) PS_CASE(2) PS_CASE(3) PS_CASE(4) PS_CASE(5) PS_CASE(6) PS_CASE(7) PS_CASE(8)
#undef PS_CASE
    default:
        power_sums_forward_any_k_kernel<<<(unsigned)rows, threads, 0, s>>>(emb, tokens, T, (int)D,
                                                                           (int)K, out);
    }
    MK_CUDA_LAUNCHED("power_sums_forward_kernel");
done:
    return status;
}

extern "C" mk_status mk_power_sums_backward_cuda_ws_bytes(int64_t rows, int64_t T, int64_t V,
                                                          size_t *bytes) {
    *bytes = 0;
    return V > 0 ? mk_buckets_bytes(rows * T, V, bytes) : MK_OK;
}

extern "C" mk_status mk_power_sums_backward_cuda_ws(const float *grad, const float *emb,
                                                    const int32_t *tokens, int64_t rows,
                                                    int64_t T, int64_t D, int64_t K, int64_t V,
                                                    float *grad_emb, void *work,
                                                    size_t work_bytes, void *stream) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    mk_buckets bk;
    if (V == 0 || D == 0) return MK_OK;
    if (D > INT32_MAX || K > INT32_MAX || K < 1)
        return mk_fail(MK_ERR_VALUE, "power_sums_backward: need 1 <= K and D below 2^31 on the GPU");
    if ((status = mk_buckets_carve(&bk, rows * T, V, work, work_bytes, "power_sums_backward")) !=
        MK_OK)
        return status;
    if (rows * T > 0) {
        power_sums_keys_kernel<<<mk_blocks_for(rows * T, 256), 256, 0, s>>>(tokens, rows * T,
                                                                           (int32_t)V, bk.keys);
        MK_CUDA_LAUNCHED("power_sums_keys_kernel");
    }
    if ((status = mk_buckets_sort(&bk, s)) != MK_OK) goto done;
    power_sums_grad_emb_kernel<<<(unsigned)(V < 65535LL * 16 ? V : 65535LL * 16),
                                 mk_column_threads(D, 32, 256), 0, s>>>(
        grad, emb, bk.order, bk.starts, V, T, (int)D, (int)K, grad_emb);
    MK_CUDA_LAUNCHED("power_sums_grad_emb_kernel");
done:
    return status;
}

/* The table's entry: on the caller's scratch, or (work = NULL, work_bytes = 0: the public
 * op, which has no arena) on scratch from the workspace pool. */
extern "C" mk_status mk_power_sums_backward_cuda(void *stream, const float *grad,
                                                 const float *emb, const int32_t *tokens,
                                                 int64_t rows, int64_t T, int64_t D, int64_t K,
                                                 int64_t V, float *grad_emb, void *work,
                                                 size_t work_bytes) {
    if (work || work_bytes)
        return mk_power_sums_backward_cuda_ws(grad, emb, tokens, rows, T, D, K, V, grad_emb,
                                              work, work_bytes, stream);
    size_t bytes = 0;
    mk_status status = D > 0 ? mk_power_sums_backward_cuda_ws_bytes(rows, T, V, &bytes) : MK_OK;
    if (status == MK_OK) status = mk_work_alloc(&work, bytes, MK_STREAM(stream));
    if (status != MK_OK) return status;
    status = mk_power_sums_backward_cuda_ws(grad, emb, tokens, rows, T, D, K, V, grad_emb, work,
                                            bytes, stream);
    return mk_work_free(work, status, MK_STREAM(stream));
}
