/* The fused policy head on the GPU (math: ../backend.h, policy_head). Contract:
 *   q [B, W] f32, table [M, W] f32, legal [B, L] i32 (slots l >= counts[b] never read),
 *   counts [B] i32 in [1, L], target [B] i32 in [0, counts[b]), soft [B, L] f32 or NULL;
 *   writes dlogits [B, L] (0 at padded slots), dq [B, W], row_loss [B], row_correct [B].
 * Indices are validated on the host before the step (batch.c); this trusts them.
 *
 * One block per position, in three phases over the same shared-memory row:
 *   1. logits: a warp per legal slot, q[b] from shared memory against the table row
 *      (float4 when aligned) through mk_warp_row_dot, as GatherDot's forward,
 *      so the logits are the same bits; lane 0 stores the logit in shared memory.
 *   2. max / first argmax, sum of exponentials, loss: block reductions (warp trees, then
 *      one warp over the per-warp partials), a fixed order, so reproducible run to run;
 *      the row's gradient overwrites its logits in shared memory and goes out to dlogits
 *      (the table scatter in gather_dot_backward still needs it).
 *   3. dq: threads own columns and sum over the legal slots in ascending l, as GatherDot's
 *      grad_hidden does, but from the gradient in shared memory; the table rows are read a
 *      second time (from L2: the move table is a few MB).
 * The split path writes logits [B, L], reads them back, writes dlogits and reads them
 * again for grad_hidden, over three launches; here the logits never leave the SM.
 *
 * Block size: enough threads to cover W columns in phase 3 in one pass (320 for W = 300),
 * at least 4 warps so phase 1 has slots in flight (L ~ 90 typical: ~9 slots per warp),
 * at most 512. Shared memory: q (W, rounded to float4) + logits (L) + move ids (L), 6 KB
 * at W = 300, L = 600. Past the 48 KB per block, less the reductions' 256 static bytes
 * (L > 5962 at W = 300), the row lives in the block's own dlogits row instead (global, but
 * written anyway and hot in L1/L2): slower, same numbers.
 */
#include "backend_cuda.h"
#include "common.cuh"

/* The kernel's static shared arrays (partial, partial_index): they count against the same
 * per-block limit as the dynamic row, so a row of exactly 48 KB would fail to launch. */
#define PH_STATIC_SMEM_BYTES (32 * (sizeof(float) + sizeof(int)))

__host__ __device__ static inline int64_t round_up4(int64_t n) { return (n + 3) / 4 * 4; }

/* Sum over the block: every warp reduces the per-warp partials in the same order, so every
 * thread gets the same total with no broadcast. `partial` holds 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *partial) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = mk_warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = mk_warp_sum(lane < warps ? partial[lane] : 0.0f);
    __syncthreads(); /* partial may be reused */
    return v;
}

/* Max and its first index over the block, the same way. */
__device__ __forceinline__ void block_argmax(float &value, int &index, float *partial,
                                             int *partial_index) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    mk_warp_argmax(value, index);
    if (lane == 0) partial[warp] = value, partial_index[warp] = index;
    __syncthreads();
    value = lane < warps ? partial[lane] : -INFINITY;
    index = lane < warps ? partial_index[lane] : INT32_MAX;
    mk_warp_argmax(value, index);
    __syncthreads();
}

template <bool VEC, bool SMEM>
static __global__ void policy_head_kernel(const float *__restrict__ q,
                                          const float *__restrict__ table,
                                          const int32_t *__restrict__ legal,
                                          const int32_t *__restrict__ counts,
                                          const int32_t *__restrict__ target,
                                          const float *__restrict__ soft, int64_t L, int W,
                                          float grad_scale, float *dlogits,
                                          float *__restrict__ dq, float *__restrict__ row_loss,
                                          float *__restrict__ row_correct) {
    extern __shared__ float4 smem4[]; /* float4 so that q's float4 reads are aligned */
    __shared__ float partial[32];
    __shared__ int partial_index[32];
    const int64_t b = blockIdx.x;
    const int n = counts[b];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    const float *h = q + b * W;
    const int32_t *idx = legal + b * L;
    float *x = dlogits + b * L; /* the row: logits, then their gradient */
    if (SMEM) {
        float *hs = reinterpret_cast<float *>(smem4);
        float *xs = hs + round_up4(W);
        int32_t *ids = reinterpret_cast<int32_t *>(xs + L);
        for (int w = tid; w < W; w += blockDim.x) hs[w] = h[w];
        for (int l = tid; l < n; l += blockDim.x) ids[l] = idx[l];
        __syncthreads();
        h = hs;
        x = xs;
        idx = ids;
    }

    /* 1. logits */
    for (int l = warp; l < n; l += warps) {
        const float acc = mk_warp_row_dot<VEC>(table + (int64_t)idx[l] * W, h, W, lane);
        if (lane == 0) x[l] = acc;
    }
    __syncthreads();

    /* 2. the cross-entropy (the formulas of softmax_xent_kernel in loss.cu) */
    float top = -INFINITY;
    int best = INT32_MAX;
    for (int l = tid; l < n; l += blockDim.x)
        if (x[l] > top) top = x[l], best = l; /* a thread's indices rise: '>' keeps the first */
    block_argmax(top, best, partial, partial_index);
    float sum = 0.0f;
    for (int l = tid; l < n; l += blockDim.x) sum += expf(x[l] - top);
    const float lse = top + logf(block_sum(sum, partial));
    const int t = target[b];
    const float *pi = soft ? soft + b * L : NULL;
    float loss;
    if (pi) {
        float part = 0.0f;
        for (int l = tid; l < n; l += blockDim.x) part += pi[l] * (lse - x[l]);
        loss = block_sum(part, partial);
    } else {
        loss = lse - x[t];
    }
    if (tid == 0) {
        row_loss[b] = loss;
        row_correct[b] = best == t ? 1.0f : 0.0f;
    }
    __syncthreads(); /* every read of the logits is done: the gradient overwrites them */
    for (int64_t l = tid; l < L; l += blockDim.x) {
        float g = 0.0f;
        if (l < n) x[l] = g = mk_xent_grad(x[l], lse, pi, t, l, grad_scale);
        dlogits[b * L + l] = g;
    }
    __syncthreads();

    /* 3. dq */
    for (int w = tid; w < W; w += blockDim.x) {
        float acc = 0.0f;
        for (int l = 0; l < n; l++) acc += x[l] * __ldg(table + (int64_t)idx[l] * W + w);
        dq[b * W + w] = acc;
    }
}

extern "C" mk_status mk_policy_head_cuda(void *stream, const float *q, const float *table,
                                         const int32_t *legal, const int32_t *counts,
                                         const int32_t *target, const float *soft, int64_t B,
                                         int64_t L, int64_t W, float grad_scale, float *dlogits,
                                         float *dq, float *row_loss, float *row_correct) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const bool vec = W % 4 == 0 && mk_aligned16(q) && mk_aligned16(table);
    const size_t smem_bytes = (size_t)(round_up4(W) + 2 * L) * sizeof(float);
    const bool smem = smem_bytes + PH_STATIC_SMEM_BYTES <= MK_SMEM_MAX_BYTES;
    const int threads = mk_column_threads(W, 128, 512);
    if (B == 0) return MK_OK;
    if (W > INT32_MAX || B > INT32_MAX || L > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "policy_head: B, L and W must be below 2^31 on the GPU");
    auto kernel = vec ? (smem ? policy_head_kernel<true, true> : policy_head_kernel<true, false>)
                      : (smem ? policy_head_kernel<false, true> : policy_head_kernel<false, false>);
    kernel<<<(unsigned)B, threads, smem ? smem_bytes : 0, s>>>(q, table, legal, counts, target,
                                                               soft, L, (int)W, grad_scale,
                                                               dlogits, dq, row_loss,
                                                               row_correct);
    MK_CUDA_LAUNCHED("policy_head_kernel");
done:
    return status;
}
