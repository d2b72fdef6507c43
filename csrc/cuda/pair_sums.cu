/* PairSums on the GPU (math: core/backend_ops.def). Contract:
 *   pair_table [num_pairs, P] f32 with num_pairs = V (V + 1) / 2, tokens [rows, T] i32 in
 *   [-1, V) (checked by the caller), out / grad [rows, P] f32, grad_pair_table dense
 *   [num_pairs, P] f32.
 *
 * Forward: one block per row. The row's tokens sit in shared memory; the block's threads
 * form `slots` groups of P lanes, each group walking every slots-th pair (i < j) and
 * reading its P-float table row (64 contiguous bytes at P = 16) into its own partial sum
 * in shared memory; the partials are then added in slot order.
 *
 * Backward (default, deterministic): the (row, i < j) entries are grouped by pair index
 * (bucket.cuh, stable), then one thread per table element writes
 * grad_pair_table[q, p] = sum of grad[row, p] over q's entries in ascending row: every
 * element of the 44 M-float table is written exactly once (no memset) and the result is
 * bitwise reproducible. The same buckets and sums feed the fused pair-table AdamW of
 * adamw.cu (pair_sums.cuh), which never stores the gradient. (An atomicAdd scatter, which
 * depends on scheduling when a pair repeats, is an experiment in lab/atomic_scatter/.) */
#include "backend_cuda.h"
#include "pair_sums.cuh"

#define PR_THREADS 256

/* How a block of `threads` splits into slots of P lanes (one lane per column when
 * P <= threads, else one slot whose lanes loop over the columns). */
struct pair_layout {
    int slots, slot, p0, pstep;
    __device__ pair_layout(int P) {
        if ((int)blockDim.x >= P) {
            slots = blockDim.x / P;
            slot = threadIdx.x / P;
            p0 = threadIdx.x % P;
            pstep = P;
        } else {
            slots = 1;
            slot = 0;
            p0 = threadIdx.x;
            pstep = blockDim.x;
        }
    }
};

static size_t forward_smem(int64_t T, int64_t P) {
    int64_t slots = PR_THREADS >= P ? PR_THREADS / P : 1;
    return (size_t)(slots * P) * sizeof(float) + (size_t)T * sizeof(int32_t);
}

static __global__ void pair_sums_forward_kernel(const float *__restrict__ table,
                                                const int32_t *__restrict__ tokens, int64_t T,
                                                int P, float *__restrict__ out) {
    extern __shared__ float smem[];
    const pair_layout lay(P);
    float *partial = smem;                                    /* [slots, P] */
    int32_t *tok = reinterpret_cast<int32_t *>(smem + lay.slots * P); /* [T] */
    const int64_t r = blockIdx.x;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) tok[t] = tokens[r * T + t];
    for (int x = threadIdx.x; x < lay.slots * P; x += blockDim.x) partial[x] = 0.0f;
    __syncthreads();
    if (lay.slot < lay.slots) {
        const int64_t pairs = T * (T - 1) / 2;
        for (int64_t q = lay.slot; q < pairs; q += lay.slots) {
            int64_t i, j;
            pair_of(q, &i, &j);
            if (tok[i] < 0 || tok[j] < 0) continue;
            const float *row = table + pair_row(tok[i], tok[j]) * P;
            for (int p = lay.p0; p < P; p += lay.pstep) partial[lay.slot * P + p] += __ldg(row + p);
        }
    }
    __syncthreads();
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < lay.slots; s++) acc += partial[s * P + p];
        out[r * P + p] = acc;
    }
}

/* Key of entry e = row * pairs + q: the pair's table row, or num_pairs if a token is empty. */
static __global__ void pair_sums_keys_kernel(const int32_t *__restrict__ tokens, int64_t rows,
                                             int64_t T, int32_t num_pairs, uint32_t *keys) {
    const int64_t pairs = T * (T - 1) / 2;
    MK_GRID_STRIDE(e, rows * pairs) {
        int64_t r = e / pairs, i, j;
        pair_of(e % pairs, &i, &j);
        const int32_t a = tokens[r * T + i], b = tokens[r * T + j];
        keys[e] = (a < 0 || b < 0) ? (uint32_t)num_pairs : (uint32_t)pair_row(a, b);
    }
}

static __global__ void pair_sums_grad_table_kernel(const float *__restrict__ grad,
                                                   const int32_t *__restrict__ order,
                                                   const int32_t *__restrict__ starts,
                                                   int64_t num_pairs, int64_t pairs, int64_t P,
                                                   float *__restrict__ grad_table) {
    MK_GRID_STRIDE(x, num_pairs * P)
        grad_table[x] = mk_pair_grad_element(grad, order, starts, pairs, P, x);
}

static mk_status check_sizes(const char *op, int64_t rows, int64_t T, int64_t P,
                             size_t smem) {
    if (rows > INT32_MAX || P > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "%s: rows and P must be below 2^31 on the GPU", op);
    if (smem > MK_SMEM_MAX_BYTES)
        return mk_fail(MK_ERR_VALUE,
                       "%s: T = %lld tokens with P = %lld columns need %zu bytes of shared "
                       "memory per block, more than the CUDA kernel's %d",
                       op, (long long)T, (long long)P, smem, MK_SMEM_MAX_BYTES);
    return MK_OK;
}

extern "C" mk_status mk_pair_sums_cuda(void *stream, const float *pair_table,
                                       const int32_t *tokens, int64_t rows, int64_t T, int64_t P,
                                       float *out) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const size_t smem = forward_smem(T, P);
    if (rows == 0 || P == 0) return MK_OK;
    if ((status = check_sizes("pair_sums", rows, T, P, smem)) != MK_OK) return status;
    pair_sums_forward_kernel<<<(unsigned)rows, PR_THREADS, smem, s>>>(pair_table, tokens, T,
                                                                      (int)P, out);
    MK_CUDA_LAUNCHED("pair_sums_forward_kernel");
done:
    return status;
}

extern "C" mk_status mk_pair_sums_backward_cuda_ws_bytes(int64_t rows, int64_t T,
                                                         int64_t num_pairs, size_t *bytes) {
    *bytes = 0;
    return num_pairs > 0 ? mk_buckets_bytes(rows * (T * (T - 1) / 2), num_pairs, bytes) : MK_OK;
}

mk_status mk_pair_buckets_cuda(const char *op, const int32_t *tokens, int64_t rows, int64_t T,
                               int64_t P, int64_t num_pairs, void *work, size_t work_bytes,
                               cudaStream_t s, mk_buckets *bk) {
    mk_status status = MK_OK;
    const int64_t pairs = T * (T - 1) / 2;
    if ((status = check_sizes(op, rows, T, P, 0)) != MK_OK) return status;
    if ((status = mk_buckets_carve(bk, rows * pairs, num_pairs, work, work_bytes, op)) != MK_OK)
        return status;
    if (rows * pairs > 0) {
        pair_sums_keys_kernel<<<mk_blocks_for(rows * pairs, 256), 256, 0, s>>>(
            tokens, rows, T, (int32_t)num_pairs, bk->keys);
        MK_CUDA_LAUNCHED("pair_sums_keys_kernel");
    }
    status = mk_buckets_sort(bk, s);
done:
    return status;
}

/* The deterministic backward: bucket the (row, pair) entries by table row (stable in entry
 * order, so each sum has a fixed order: reproducible), then write each row's gradient. The
 * buckets live in `work` (checked before any launch). */
extern "C" mk_status mk_pair_sums_backward_cuda_ws(const float *grad, const int32_t *tokens,
                                                   int64_t rows, int64_t T, int64_t P,
                                                   int64_t num_pairs, float *grad_pair_table,
                                                   void *work, size_t work_bytes, void *stream) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const int64_t pairs = T * (T - 1) / 2;
    mk_buckets bk;
    if (num_pairs == 0 || P == 0) return MK_OK;
    if ((status = mk_pair_buckets_cuda("pair_sums_backward", tokens, rows, T, P, num_pairs, work,
                                       work_bytes, s, &bk)) != MK_OK)
        return status;
    pair_sums_grad_table_kernel<<<mk_blocks_for(num_pairs * P, 256), 256, 0, s>>>(
        grad, bk.order, bk.starts, num_pairs, pairs > 0 ? pairs : 1, P, grad_pair_table);
    MK_CUDA_LAUNCHED("pair_sums_grad_table_kernel");
done:
    return status;
}

/* The table's entry: on the caller's scratch, or (work = NULL, work_bytes = 0: the public
 * op, which has no arena) on scratch from the workspace pool. */
extern "C" mk_status mk_pair_sums_backward_cuda(void *stream, const float *grad,
                                                const int32_t *tokens, int64_t rows, int64_t T,
                                                int64_t P, int64_t num_pairs,
                                                float *grad_pair_table, void *work,
                                                size_t work_bytes) {
    if (work || work_bytes)
        return mk_pair_sums_backward_cuda_ws(grad, tokens, rows, T, P, num_pairs,
                                             grad_pair_table, work, work_bytes, stream);
    size_t bytes = 0;
    mk_status status = P > 0 ? mk_pair_sums_backward_cuda_ws_bytes(rows, T, num_pairs, &bytes)
                             : MK_OK;
    if (status == MK_OK) status = mk_work_alloc(&work, bytes, MK_STREAM(stream));
    if (status != MK_OK) return status;
    status = mk_pair_sums_backward_cuda_ws(grad, tokens, rows, T, P, num_pairs, grad_pair_table,
                                           work, bytes, stream);
    return mk_work_free(work, status, MK_STREAM(stream));
}
