/* Experiment: the two table gradients of the backward pass scattered with atomicAdd, as
 * alternatives to the product's deterministic scatters (csrc/cuda/gather_dot.cu and
 * pair_sums.cu group the entries by destination row with a stable sort, then sum each row
 * in a fixed order).
 *
 * Same inputs and results as the product's table gradient, but the order of the float adds
 * into a shared row depends on scheduling: whenever a destination row repeats, the last bits
 * vary from run to run. The product keeps reproducibility; this file exists so that its
 * cost can be measured (bench.py), not to be shipped: nothing in manaka links it.
 *
 * Both zero the table first (every row, touched or not), then add.
 *   GatherDot: grad_table[m, :] = sum over (b, l < counts[b]) with indices[b, l] = m of
 *              grad[b, l] * hidden[b, :]                                     [M, W]
 *   PairSums:  grad_table[pair_row(t_i, t_j), :] += grad[r, :] for every row r and every
 *              pair i < j of its non-empty tokens                            [num_pairs, P] */
#include "cuda/common.cuh"    /* MK_CUDA_TRY, MK_STREAM */
#include "cuda/pair_sums.cuh" /* pair_of, pair_row: the product's pair order */

#define LAB_THREADS 256

/* One block per position; a warp per legal slot adds G[b, l] * hidden[b, :] into its row. */
static __global__ void gather_dot_table_atomic_kernel(const float *__restrict__ grad,
                                                      const float *__restrict__ hidden,
                                                      const int32_t *__restrict__ indices,
                                                      const int32_t *__restrict__ counts,
                                                      int64_t L, int W, float *grad_table) {
    const int64_t b = blockIdx.x;
    const int64_t n = counts ? counts[b] : L;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int64_t l = warp; l < n; l += warps) {
        const float g = grad[b * L + l];
        float *row = grad_table + (int64_t)indices[b * L + l] * W;
        for (int w = lane; w < W; w += 32) atomicAdd(row + w, g * hidden[b * W + w]);
    }
}

/* One block per row of tokens, held in shared memory; the block's threads split into slots
 * of P lanes (one lane per column), each slot walking every slots-th pair. */
static __global__ void pair_sums_table_atomic_kernel(const float *__restrict__ grad,
                                                     const int32_t *__restrict__ tokens,
                                                     int64_t T, int P, float *grad_table) {
    extern __shared__ int32_t tok[];
    const int64_t r = blockIdx.x;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) tok[t] = tokens[r * T + t];
    __syncthreads();
    const int wide = (int)blockDim.x >= P;
    const int slots = wide ? blockDim.x / P : 1, slot = wide ? threadIdx.x / P : 0;
    const int p0 = wide ? threadIdx.x % P : threadIdx.x, pstep = wide ? P : blockDim.x;
    if (slot >= slots) return;
    const int64_t pairs = T * (T - 1) / 2;
    for (int64_t q = slot; q < pairs; q += slots) {
        int64_t i, j;
        pair_of(q, &i, &j);
        if (tok[i] < 0 || tok[j] < 0) continue;
        float *row = grad_table + pair_row(tok[i], tok[j]) * P;
        for (int p = p0; p < P; p += pstep) atomicAdd(row + p, grad[r * P + p]);
    }
}

/* The launchers: MK_OK, or the status of the first failed CUDA call (mk_error() says which).
 * Sizes are the caller's to check (the benchmark passes the product's checked shapes). */
extern "C" mk_status mk_lab_gather_dot_table_atomic_cuda(void *stream, const float *grad,
                                                        const float *hidden,
                                                        const int32_t *indices,
                                                        const int32_t *counts, int64_t B,
                                                        int64_t L, int64_t W, int64_t M,
                                                        float *grad_table) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    if (M == 0 || W == 0) return MK_OK;
    MK_CUDA_TRY(cudaMemsetAsync(grad_table, 0, (size_t)(M * W) * sizeof(float), s));
    if (B > 0 && L > 0) {
        gather_dot_table_atomic_kernel<<<(unsigned)B, LAB_THREADS, 0, s>>>(
            grad, hidden, indices, counts, L, (int)W, grad_table);
        MK_CUDA_TRY(cudaGetLastError());
    }
done:
    return status;
}

extern "C" mk_status mk_lab_pair_sums_table_atomic_cuda(void *stream, const float *grad,
                                                       const int32_t *tokens, int64_t rows,
                                                       int64_t T, int64_t P, int64_t num_pairs,
                                                       float *grad_table) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    if (num_pairs == 0 || P == 0) return MK_OK;
    MK_CUDA_TRY(cudaMemsetAsync(grad_table, 0, (size_t)(num_pairs * P) * sizeof(float), s));
    if (rows > 0) {
        pair_sums_table_atomic_kernel<<<(unsigned)rows, LAB_THREADS, (size_t)T * sizeof(int32_t),
                                        s>>>(grad, tokens, T, (int)P, grad_table);
        MK_CUDA_TRY(cudaGetLastError());
    }
done:
    return status;
}
