/* GatherDot on the GPU (math: core/backend_ops.def). Contract:
 *   hidden [B, W] f32, table [M, W] f32, indices [B, L] i32, counts [B] i32 or NULL (= L),
 *   logits / grad [B, L] f32; padded slots (l >= counts[b]) are never read from indices.
 * Indices and counts are range-checked by the caller (check.cu) before any launch.
 *
 * Forward and grad_hidden: one block per position. The forward keeps hidden[b] in shared
 * memory and gives each warp one legal slot at a time: the warp reads the table row with
 * float4 loads (when W % 4 == 0 and both matrices are 16-byte aligned) and reduces in a
 * fixed shuffle tree. Padded slots are written 0 and cost nothing else. No [B, L, W]
 * intermediate exists anywhere.
 *
 * grad_table (default, deterministic): group the legal (b, l) by move id (bucket.cuh,
 * stable), then one block per table row sums G[b, l] * hidden[b, :] over its entries in
 * ascending (b, l): bitwise reproducible run to run, and every row (also unused ones) is
 * written exactly once, so no memset. (An atomicAdd scatter, faster to write but not
 * reproducible, is an experiment in lab/atomic_scatter/.) */
#include "backend_cuda.h"
#include "bucket.cuh"

#define GD_THREADS 256

template <bool VEC, bool SMEM>
static __global__ void gather_dot_forward_kernel(const float *__restrict__ hidden,
                                                 const float *__restrict__ table,
                                                 const int32_t *__restrict__ indices,
                                                 const int32_t *__restrict__ counts, int64_t L,
                                                 int W, float *__restrict__ logits) {
    extern __shared__ float4 smem4[]; /* float4 so that the float4 reads are aligned */
    const int64_t b = blockIdx.x;
    const float *h = hidden + b * W;
    if (SMEM) {
        float *hs = reinterpret_cast<float *>(smem4);
        for (int w = threadIdx.x; w < W; w += blockDim.x) hs[w] = h[w];
        __syncthreads();
        h = hs;
    }
    const int64_t n = counts ? counts[b] : L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int64_t l = warp; l < n; l += warps) {
        const float acc =
            mk_warp_row_dot<VEC>(table + (int64_t)indices[b * L + l] * W, h, W, lane);
        if (lane == 0) logits[b * L + l] = acc;
    }
    for (int64_t l = n + threadIdx.x; l < L; l += blockDim.x) logits[b * L + l] = 0.0f;
}

/* grad_hidden[b, w] = sum_{l < n} G[b, l] table[indices[b, l], w]: threads own columns,
 * so each column is summed in ascending l by one thread (reproducible), and a warp reads
 * 32 consecutive floats of a row per step. */
static __global__ void gather_dot_grad_hidden_kernel(const float *__restrict__ grad,
                                                     const float *__restrict__ table,
                                                     const int32_t *__restrict__ indices,
                                                     const int32_t *__restrict__ counts,
                                                     int64_t L, int W,
                                                     float *__restrict__ grad_hidden) {
    const int64_t b = blockIdx.x;
    const int64_t n = counts ? counts[b] : L;
    for (int w = threadIdx.x; w < W; w += blockDim.x) {
        float acc = 0.0f;
        for (int64_t l = 0; l < n; l++)
            acc += grad[b * L + l] * __ldg(table + (int64_t)indices[b * L + l] * W + w);
        grad_hidden[b * W + w] = acc;
    }
}

/* Key of entry p = b * L + l: its move id, or M (ignored) at a padded slot. */
static __global__ void gather_dot_keys_kernel(const int32_t *__restrict__ indices,
                                              const int32_t *__restrict__ counts, int64_t B,
                                              int64_t L, int32_t M, uint32_t *keys) {
    MK_GRID_STRIDE(p, B * L) {
        int64_t b = p / L, l = p % L;
        int64_t n = counts ? counts[b] : L;
        keys[p] = l < n ? (uint32_t)indices[p] : (uint32_t)M;
    }
}

/* One block per table row m: grad_table[m, w] = sum over m's entries, in order (rows not
 * NULL: only the rows it marks). */
static __global__ void gather_dot_grad_table_kernel(const float *__restrict__ grad,
                                                    const float *__restrict__ hidden,
                                                    const int32_t *__restrict__ order,
                                                    const int32_t *__restrict__ starts,
                                                    const uint8_t *__restrict__ rows,
                                                    int64_t M, int64_t L, int W,
                                                    float *__restrict__ grad_table) {
    for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
        if (rows && !rows[m]) continue; /* the same for the whole block */
        const int32_t begin = starts[m], end = starts[m + 1];
        for (int w = threadIdx.x; w < W; w += blockDim.x) {
            float acc = 0.0f;
            for (int32_t j = begin; j < end; j++) {
                const int64_t p = order[j];
                acc += grad[p] * hidden[(p / L) * W + w];
            }
            grad_table[m * W + w] = acc;
        }
    }
}

extern "C" mk_status mk_gather_dot_cuda(void *stream, const float *hidden, const float *table,
                                        const int32_t *indices, const int32_t *counts,
                                        int64_t B, int64_t L, int64_t W, float *logits) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const bool vec = W % 4 == 0 && mk_aligned16(hidden) && mk_aligned16(table);
    const bool smem = W <= MK_SMEM_MAX_BYTES / (int64_t)sizeof(float);
    const size_t smem_bytes = smem ? (size_t)W * sizeof(float) : 0;
    if (B == 0 || L == 0) return MK_OK;
    if (W > INT32_MAX || B > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "gather_dot: W and B must be below 2^31 on the GPU");
    auto kernel = vec ? (smem ? gather_dot_forward_kernel<true, true>
                              : gather_dot_forward_kernel<true, false>)
                      : (smem ? gather_dot_forward_kernel<false, true>
                              : gather_dot_forward_kernel<false, false>);
    kernel<<<(unsigned)B, GD_THREADS, smem_bytes, s>>>(hidden, table, indices, counts, L, (int)W,
                                                       logits);
    MK_CUDA_LAUNCHED("gather_dot_forward_kernel");
done:
    return status;
}

static mk_status grad_hidden_cuda(const float *grad, const float *table, const int32_t *indices,
                                  const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                  float *grad_hidden, cudaStream_t s) {
    mk_status status = MK_OK;
    gather_dot_grad_hidden_kernel<<<(unsigned)B, mk_column_threads(W, 32, 256), 0, s>>>(
        grad, table, indices, counts, L, (int)W, grad_hidden);
    MK_CUDA_LAUNCHED("gather_dot_grad_hidden_kernel");
done:
    return status;
}

static mk_status check_sizes(int64_t B, int64_t W) {
    if (W > INT32_MAX || B > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "gather_dot_backward: W and B must be below 2^31 on the GPU");
    return MK_OK;
}

/* grad_table is wanted and not empty: the only part that needs scratch. */
static bool wants_table_grad(const float *grad_table, int64_t M, int64_t W) {
    return grad_table && M > 0 && W > 0;
}

extern "C" mk_status mk_gather_dot_backward_cuda_ws_bytes(int64_t B, int64_t L, int64_t M,
                                                          size_t *bytes) {
    *bytes = 0;
    return M > 0 ? mk_buckets_bytes(B * L, M, bytes) : MK_OK;
}

extern "C" mk_status mk_gather_dot_backward_cuda_ws(const float *grad, const float *hidden,
                                                    const float *table, const int32_t *indices,
                                                    const int32_t *counts, int64_t B, int64_t L,
                                                    int64_t W, int64_t M, float *grad_hidden,
                                                    float *grad_table, const uint8_t *rows,
                                                    void *work, size_t work_bytes, void *stream) {
    mk_status status = check_sizes(B, W);
    cudaStream_t s = MK_STREAM(stream);
    const bool table_grad = wants_table_grad(grad_table, M, W);
    mk_buckets bk;
    if (status != MK_OK) return status;
    /* the scratch is checked before anything is launched: too small writes nothing */
    if (table_grad && (status = mk_buckets_carve(&bk, B * L, M, work, work_bytes,
                                                 "gather_dot_backward")) != MK_OK)
        return status;
    if (grad_hidden && B > 0 && W > 0) {
        status = grad_hidden_cuda(grad, table, indices, counts, B, L, W, grad_hidden, s);
        if (status != MK_OK) return status;
    }
    if (!table_grad) return MK_OK;
    if (B * L > 0) {
        gather_dot_keys_kernel<<<mk_blocks_for(B * L, 256), 256, 0, s>>>(indices, counts, B, L,
                                                                        (int32_t)M, bk.keys);
        MK_CUDA_LAUNCHED("gather_dot_keys_kernel");
    }
    if ((status = mk_buckets_sort(&bk, s)) != MK_OK) goto done;
    gather_dot_grad_table_kernel<<<(unsigned)(M < 65535LL * 16 ? M : 65535LL * 16),
                                   mk_column_threads(W, 32, 256), 0, s>>>(
        grad, hidden, bk.order, bk.starts, rows, M, L, (int)W, grad_table);
    MK_CUDA_LAUNCHED("gather_dot_grad_table_kernel");
done:
    return status;
}

/* The table's entry: on the caller's scratch, or (work = NULL, work_bytes = 0: the public
 * op, which has no arena) on scratch from the workspace pool. */
extern "C" mk_status mk_gather_dot_backward_cuda(void *stream, const float *grad,
                                                 const float *hidden, const float *table,
                                                 const int32_t *indices, const int32_t *counts,
                                                 int64_t B, int64_t L, int64_t W, int64_t M,
                                                 float *grad_hidden, float *grad_table,
                                                 const uint8_t *rows, void *work,
                                                 size_t work_bytes) {
    if (work || work_bytes)
        return mk_gather_dot_backward_cuda_ws(grad, hidden, table, indices, counts, B, L, W, M,
                                              grad_hidden, grad_table, rows, work, work_bytes,
                                              stream);
    size_t bytes = 0;
    mk_status status = wants_table_grad(grad_table, M, W)
                           ? mk_gather_dot_backward_cuda_ws_bytes(B, L, M, &bytes)
                           : MK_OK;
    if (status == MK_OK) status = mk_work_alloc(&work, bytes, MK_STREAM(stream));
    if (status != MK_OK) return status;
    status = mk_gather_dot_backward_cuda_ws(grad, hidden, table, indices, counts, B, L, W, M,
                                            grad_hidden, grad_table, rows, work, bytes, stream);
    return mk_work_free(work, status, MK_STREAM(stream));
}
