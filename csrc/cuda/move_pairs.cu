/* MovePairSums on the GPU (math: core/backend_ops.def). Contract:
 *   table / grad_table [V, C] f32; tokens: position b's T slots at tokens + b * token_stride,
 *   i32 in [-1, V) (-1 = empty); legal [B, L] i32 >= 0 with counts [B] or NULL (= L);
 *   logits / grad [B, L] f32. Padded slots (l >= counts[b]) are never read or written.
 *
 * Forward: one block per position, its tokens in shared memory; a thread per legal slot
 * adds the T table entries of its class onto logits[b, l] in ascending t (the CPU's order).
 *
 * Backward (deterministic, no float atomics), three passes:
 *  1. per position, the slots that share a class (m % C) are merged: the first slot of
 *     each class (its leader) gets the sum of its class's grads in ascending l and keeps
 *     the class; the others get class -1. A position's leaders so hold distinct classes.
 *  2. the token occurrences (b, t) are grouped by token (bucket.cuh, stable: ascending b).
 *  3. one block per token v accumulates row v in shared memory (in grad_table's row when
 *     C is too large), one occurrence after another with a barrier between them: within an
 *     occurrence the leaders write distinct columns, so no two threads ever race, and every
 *     column sums its occurrences in ascending (b, t). Rows with no occurrence are written 0.
 * Scratch: the merged classes and grads [B, L] each, then the buckets of B * T entries. */
#include "backend_cuda.h"
#include "bucket.cuh"

#define MP_MAX_THREADS 256
/* Occurrences whose positions the scatter block looks up in one round of loads (at most
 * its threads, which are at least 64), and of those, how many it loads ahead. */
#define MP_BATCH 64
#define MP_DEPTH 8
#define MP_ALIGN ((size_t)256)

static size_t mp_round_up(size_t bytes) { return (bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN; }

template <bool SMEM>
static __global__ void move_pair_sums_forward_kernel(const float *__restrict__ table,
                                                     const int32_t *__restrict__ tokens,
                                                     int64_t token_stride,
                                                     const int32_t *__restrict__ legal,
                                                     const int32_t *__restrict__ counts,
                                                     int64_t B, int64_t T, int64_t L, int C,
                                                     float *__restrict__ logits) {
    extern __shared__ float4 smem4[];
    int32_t *ts = reinterpret_cast<int32_t *>(smem4);
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        const int32_t *tok = tokens + b * token_stride;
        if (SMEM) {
            __syncthreads(); /* the previous position's readers are done with ts */
            for (int64_t t = threadIdx.x; t < T; t += blockDim.x) ts[t] = tok[t];
            __syncthreads();
            tok = ts;
        }
        const int64_t n = counts ? counts[b] : L;
        for (int64_t l = threadIdx.x; l < n; l += blockDim.x) {
            const int c = legal[b * L + l] % C;
            float acc = logits[b * L + l];
            for (int64_t t = 0; t < T; t++) {
                const int32_t v = tok[t];
                if (v >= 0) acc += __ldg(table + (int64_t)v * C + c);
            }
            logits[b * L + l] = acc;
        }
    }
}

/* Pass 1. Slot l of position b: cls = its class if no earlier slot has it (else -1), val =
 * the sum of the grads of the slots l' >= l of its class, ascending (only read for a
 * leader). O(n^2) compares per position, in shared memory when the row fits. */
template <bool SMEM>
static __global__ void move_pair_classes_kernel(const float *__restrict__ grad,
                                                const int32_t *__restrict__ legal,
                                                const int32_t *__restrict__ counts, int64_t B,
                                                int64_t L, int C, int32_t *__restrict__ cls,
                                                float *__restrict__ val) {
    extern __shared__ float4 smem4[];
    int32_t *cs = reinterpret_cast<int32_t *>(smem4);
    float *gs = reinterpret_cast<float *>(cs + L);
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        const int32_t *mv = legal + b * L;
        const float *g = grad + b * L;
        const int64_t n = counts ? counts[b] : L;
        if (SMEM) {
            __syncthreads();
            for (int64_t l = threadIdx.x; l < n; l += blockDim.x) {
                cs[l] = mv[l] % C;
                gs[l] = g[l];
            }
            __syncthreads();
        }
#define MP_CLASS(k) (SMEM ? cs[k] : mv[k] % C)
#define MP_GRAD(k) (SMEM ? gs[k] : g[k])
        for (int64_t l = threadIdx.x; l < n; l += blockDim.x) {
            const int32_t c = MP_CLASS(l);
            bool leader = true;
            for (int64_t k = 0; k < l && leader; k++) leader = MP_CLASS(k) != c;
            float sum = 0.0f;
            if (leader) {
                sum = MP_GRAD(l);
                for (int64_t k = l + 1; k < n; k++)
                    if (MP_CLASS(k) == c) sum += MP_GRAD(k);
            }
            cls[b * L + l] = leader ? c : -1;
            val[b * L + l] = sum;
        }
#undef MP_CLASS
#undef MP_GRAD
    }
}

/* Pass 2's keys: entry p = b * T + t is keyed by its token, or V (ignored) when empty. */
static __global__ void move_pair_keys_kernel(const int32_t *__restrict__ tokens,
                                             int64_t token_stride, int64_t n, int64_t T,
                                             int32_t V, uint32_t *keys) {
    MK_GRID_STRIDE(p, n) {
        const int64_t b = p / T, t = p - b * T;
        const int32_t v = tokens[b * token_stride + t];
        keys[p] = v >= 0 ? (uint32_t)v : (uint32_t)V;
    }
}

/* Pass 3: block per token v, row accumulated in shared memory when SMEM_ACC (else in
 * grad_table's own row, which only this block touches). The barrier after each
 * occurrence orders the adds to a column by occurrence. The order of the adds is all that
 * must be serial, not the loads: each thread loads its slot of MP_DEPTH occurrences before
 * adding the first, so a token found in most positions (a pawn on its home square) pays
 * one load latency per MP_DEPTH occurrences. */
template <bool SMEM_ACC>
static __global__ void move_pair_scatter_kernel(const int32_t *__restrict__ cls,
                                                const float *__restrict__ val,
                                                const int32_t *__restrict__ counts,
                                                const int32_t *__restrict__ order,
                                                const int32_t *__restrict__ starts, int64_t V,
                                                int64_t T, int64_t L, int C,
                                                float *__restrict__ grad_table) {
    extern __shared__ float4 smem4[];
    __shared__ int64_t base[MP_BATCH];
    __shared__ int64_t count[MP_BATCH];
    const int tid = threadIdx.x;
    for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
        float *row = SMEM_ACC ? reinterpret_cast<float *>(smem4) : grad_table + v * C;
        for (int c = tid; c < C; c += blockDim.x) row[c] = 0.0f;
        const int32_t begin = starts[v], end = starts[v + 1];
        for (int32_t j0 = begin; j0 < end; j0 += MP_BATCH) {
            const int kn = end - j0 < MP_BATCH ? end - j0 : MP_BATCH;
            __syncthreads(); /* the zeroing, and the previous batch's reads of base/count */
            if (tid < kn) {
                const int64_t b = order[j0 + tid] / T;
                base[tid] = b * L;
                count[tid] = counts ? counts[b] : L;
            }
            __syncthreads();
            for (int k0 = 0; k0 < kn; k0 += MP_DEPTH) {
                /* MP_DEPTH occurrences' first slots in flight at once */
                int32_t cr[MP_DEPTH];
                float xr[MP_DEPTH];
#pragma unroll
                for (int i = 0; i < MP_DEPTH; i++) {
                    const int k = k0 + i;
                    cr[i] = -1;
                    xr[i] = 0.0f;
                    if (k < kn && tid < count[k])
                        cr[i] = cls[base[k] + tid], xr[i] = val[base[k] + tid];
                }
#pragma unroll
                for (int i = 0; i < MP_DEPTH; i++) {
                    const int k = k0 + i;
                    if (k >= kn) break; /* the same for every thread */
                    if (cr[i] >= 0) row[cr[i]] += xr[i];
                    for (int64_t l = tid + blockDim.x; l < count[k]; l += blockDim.x) {
                        const int32_t c = cls[base[k] + l];
                        if (c >= 0) row[c] += val[base[k] + l];
                    }
                    __syncthreads();
                }
            }
        }
        if (SMEM_ACC) {
            __syncthreads();
            for (int c = tid; c < C; c += blockDim.x) grad_table[v * C + c] = row[c];
            __syncthreads(); /* before the next row zeroes the accumulator */
        }
    }
}

static unsigned grid_for(int64_t items) {
    return (unsigned)(items < 65535LL * 16 ? items : 65535LL * 16);
}

extern "C" mk_status mk_move_pair_sums_cuda(void *stream, const float *table,
                                            const int32_t *tokens, int64_t token_stride,
                                            const int32_t *legal, const int32_t *counts,
                                            int64_t B, int64_t T, int64_t L, int64_t C,
                                            float *logits) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    const bool smem = T * (int64_t)sizeof(int32_t) <= MK_SMEM_MAX_BYTES;
    if (B == 0 || L == 0 || T == 0) return MK_OK;
    if (C < 1 || C > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "move_pair_sums: C must be in [1, 2^31) on the GPU, got %lld",
                       (long long)C);
    auto kernel = smem ? move_pair_sums_forward_kernel<true> : move_pair_sums_forward_kernel<false>;
    kernel<<<grid_for(B), mk_column_threads(L, 32, MP_MAX_THREADS),
           smem ? (size_t)T * sizeof(int32_t) : 0, s>>>(table, tokens, token_stride, legal,
                                                        counts, B, T, L, (int)C, logits);
    MK_CUDA_LAUNCHED("move_pair_sums_forward_kernel");
done:
    return status;
}

/* The merged classes and grads: two [B, L] arrays, each on its own 256-byte boundary. */
static size_t merged_bytes(int64_t B, int64_t L) {
    return 2 * mp_round_up((size_t)(B * L > 0 ? B * L : 1) * 4);
}

extern "C" mk_status mk_move_pair_sums_backward_cuda_ws_bytes(int64_t B, int64_t T, int64_t L,
                                                              int64_t V, size_t *bytes) {
    size_t buckets = 0;
    mk_status status;
    *bytes = 0;
    if (V <= 0) return MK_OK;
    if (B < 0 || L < 0 || (L > 0 && B > INT64_MAX / 8 / L))
        return mk_fail(MK_ERR_VALUE, "move_pair_sums_backward: B = %lld, L = %lld is too large",
                       (long long)B, (long long)L);
    if ((status = mk_buckets_bytes(B * T, V, &buckets)) != MK_OK) return status;
    *bytes = merged_bytes(B, L) + MP_ALIGN - 1 + buckets;
    return MK_OK;
}

extern "C" mk_status mk_move_pair_sums_backward_cuda_ws(
    const float *grad, const int32_t *tokens, int64_t token_stride, const int32_t *legal,
    const int32_t *counts, int64_t B, int64_t T, int64_t L, int64_t V, int64_t C,
    float *grad_table, void *work, size_t work_bytes, void *stream) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    mk_buckets bk;
    size_t need = 0;
    char *at;
    int32_t *cls;
    float *val;
    const bool acc_smem = C * (int64_t)sizeof(float) + 1024 <= MK_SMEM_MAX_BYTES;
    const bool row_smem = L * 2 * (int64_t)sizeof(float) <= MK_SMEM_MAX_BYTES;
    const int threads = mk_column_threads(L, MP_BATCH, MP_MAX_THREADS); /* >= MP_BATCH */
    auto scatter = acc_smem ? move_pair_scatter_kernel<true> : move_pair_scatter_kernel<false>;
    if (V == 0 || C == 0) return MK_OK;
    if (C < 0 || C > INT32_MAX || V > INT32_MAX)
        return mk_fail(MK_ERR_VALUE,
                       "move_pair_sums_backward: V and C must be in [0, 2^31) on the GPU");
    /* the scratch is checked before anything is launched: too small writes nothing */
    if ((status = mk_move_pair_sums_backward_cuda_ws_bytes(B, T, L, V, &need)) != MK_OK)
        return status;
    if (!work || work_bytes < need)
        return mk_fail(MK_ERR_VALUE,
                       "move_pair_sums_backward: the scratch given holds %zu bytes; B = %lld, "
                       "T = %lld, L = %lld, V = %lld need %zu",
                       work ? work_bytes : (size_t)0, (long long)B, (long long)T, (long long)L,
                       (long long)V, need);
    at = (char *)(((uintptr_t)work + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN);
    cls = (int32_t *)at;
    val = (float *)(at + merged_bytes(B, L) / 2);
    at += merged_bytes(B, L);
    if ((status = mk_buckets_carve(&bk, B * T, V, at, work_bytes - (size_t)(at - (char *)work),
                                   "move_pair_sums_backward")) != MK_OK)
        return status;
    if (B * L > 0) {
        auto classes = row_smem ? move_pair_classes_kernel<true> : move_pair_classes_kernel<false>;
        classes<<<grid_for(B), threads, row_smem ? (size_t)L * 2 * sizeof(float) : 0, s>>>(
                grad, legal, counts, B, L, (int)C, cls, val);
        MK_CUDA_LAUNCHED("move_pair_classes_kernel");
    }
    if (B * T > 0) {
        move_pair_keys_kernel<<<mk_blocks_for(B * T, 256), 256, 0, s>>>(
            tokens, token_stride, B * T, T, (int32_t)V, bk.keys);
        MK_CUDA_LAUNCHED("move_pair_keys_kernel");
    }
    if ((status = mk_buckets_sort(&bk, s)) != MK_OK) goto done;
    scatter<<<grid_for(V), threads, acc_smem ? (size_t)C * sizeof(float) : 0, s>>>(
            cls, val, counts, bk.order, bk.starts, V, T, L, (int)C, grad_table);
    MK_CUDA_LAUNCHED("move_pair_scatter_kernel");
done:
    return status;
}

/* The table's entry: on the caller's scratch, or (work = NULL, work_bytes = 0: the public
 * op, which has no arena) on scratch from the workspace pool. */
extern "C" mk_status mk_move_pair_sums_backward_cuda(void *stream, const float *grad,
                                                     const int32_t *tokens, int64_t token_stride,
                                                     const int32_t *legal, const int32_t *counts,
                                                     int64_t B, int64_t T, int64_t L, int64_t V,
                                                     int64_t C, float *grad_table, void *work,
                                                     size_t work_bytes) {
    if (work || work_bytes)
        return mk_move_pair_sums_backward_cuda_ws(grad, tokens, token_stride, legal, counts, B,
                                                  T, L, V, C, grad_table, work, work_bytes,
                                                  stream);
    size_t bytes = 0;
    mk_status status = C > 0 ? mk_move_pair_sums_backward_cuda_ws_bytes(B, T, L, V, &bytes)
                             : MK_OK;
    if (status == MK_OK) status = mk_work_alloc(&work, bytes, MK_STREAM(stream));
    if (status != MK_OK) return status;
    status = mk_move_pair_sums_backward_cuda_ws(grad, tokens, token_stride, legal, counts, B, T,
                                                L, V, C, grad_table, work, bytes, stream);
    return mk_work_free(work, status, MK_STREAM(stream));
}
