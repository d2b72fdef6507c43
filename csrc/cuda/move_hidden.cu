/* MoveHidden's forward on the GPU (math and summation orders: core/backend_ops.def; the
 * relative index: core/move_pair_board.h; the backward: move_hidden_backward.cu). Contract:
 *   relative [R, D], class_rows [C, D], out [D] (out_stride 0) or [B, D] (out_stride D) f32; tokens: position b's T slots at
 *   tokens + b * token_stride, i32 (-1 = empty; >= K S: a piece in hand, adds nothing);
 *   legal [B, L] i32 >= 0 with counts [B] or NULL (= L); pre [B, L, D] and logits [B, L]
 *   f32. Padded slots (l >= counts[b]) are never read or written.
 *
 * One block per position (grid-stride), its tokens' row parts in shared memory. The block
 * takes its legal moves `per` at a time (per = max(1, threads / D)): a thread per (move, d)
 * sums pre[b, l, d] from class_rows in ascending t (the CPU's order; a warp reads D
 * consecutive floats of a row), writes it, and leaves out[d] max(pre, 0) in shared memory;
 * after a barrier a thread per move adds those D products in ascending d from 0 and adds
 * the dot to logits[b, l]. __fmul_rn / __fadd_rn keep nvcc from contracting the product
 * and the add into an FMA, which would round once where the CPU rounds twice.
 * The products' rows are D | 1 floats apart, an odd stride: the per-move threads reading
 * column d hit distinct banks. */
#include "backend_cuda.h"
#include "common.cuh"
#include "core/move_pair_board.h"

#define MH_MAX_THREADS 256

/* the row stride of the products in shared memory */
static __host__ __device__ int64_t mh_stride(int64_t D) { return D | 1; }

template <bool SMEM_TOKENS>
static __global__ void move_hidden_forward_kernel(
    const float *__restrict__ relative, const float *__restrict__ class_rows,
    const float *__restrict__ out, int64_t out_stride, const int32_t *__restrict__ tokens,
    int64_t token_stride, const int32_t *__restrict__ legal, const int32_t *__restrict__ counts, int64_t B, int64_t T,
    int64_t L, int64_t C, int64_t W, int64_t H, int64_t K, int64_t D, float *__restrict__ pre,
    float *__restrict__ logits) {
    extern __shared__ float4 smem4[];
    int64_t *parts = reinterpret_cast<int64_t *>(smem4); /* [T] when SMEM_TOKENS */
    float *prod = reinterpret_cast<float *>(parts + (SMEM_TOKENS ? T : 0));
    const int64_t per = blockDim.x >= D ? blockDim.x / D : 1, stride = mh_stride(D);
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        const int32_t *tok = tokens + b * token_stride;
        if (SMEM_TOKENS) {
            __syncthreads(); /* the previous position's readers are done with parts */
            for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
                parts[t] = mk_relative_token(tok[t], C, W, H, K);
            __syncthreads();
        }
        const int64_t n = counts ? counts[b] : L;
        for (int64_t l0 = 0; l0 < n; l0 += per) { /* the same trip count in every thread */
            for (int64_t j = threadIdx.x; j < per * D; j += blockDim.x) {
                const int64_t e = j / D, d = j - e * D, l = l0 + e;
                if (l >= n) continue;
                const int64_t c = legal[b * L + l] % C;
                const int64_t part = mk_relative_class(c, C, W, H);
                float acc = __ldg(class_rows + c * D + d);
                for (int64_t t = 0; t < T; t++) {
                    const int64_t base =
                        SMEM_TOKENS ? parts[t] : mk_relative_token(tok[t], C, W, H, K);
                    if (base >= 0) acc = __fadd_rn(acc, __ldg(relative + (base + part) * D + d));
                }
                pre[(b * L + l) * D + d] = acc;
                prod[e * stride + d] =
                    __fmul_rn(__ldg(out + b * out_stride + d), acc > 0.0f ? acc : 0.0f);
            }
            __syncthreads();
            for (int64_t e = threadIdx.x; e < per && l0 + e < n; e += blockDim.x) {
                float dot = 0.0f;
                for (int64_t d = 0; d < D; d++) dot = __fadd_rn(dot, prod[e * stride + d]);
                logits[b * L + l0 + e] = __fadd_rn(logits[b * L + l0 + e], dot);
            }
            __syncthreads(); /* before the next moves overwrite prod */
        }
    }
}

/* The block's threads and its products' shared memory for D units. */
static int forward_threads(int64_t L, int64_t D) {
    return mk_column_threads(L * D, 32, MH_MAX_THREADS);
}
static size_t products_bytes(int threads, int64_t D) {
    const int64_t per = threads >= D ? threads / D : 1;
    return (size_t)(per * mh_stride(D)) * sizeof(float);
}

extern "C" mk_status mk_move_hidden_cuda(void *stream, const float *relative,
                                         const float *class_rows, const float *out,
                                         int64_t out_stride, const int32_t *tokens,
                                         int64_t token_stride,
                                         const int32_t *legal, const int32_t *counts, int64_t B,
                                         int64_t T, int64_t L, int64_t C, int64_t W, int64_t H,
                                         int64_t K, int64_t D, float *pre, float *logits) {
    mk_status status = MK_OK;
    if (B == 0 || L == 0 || D == 0) return MK_OK;
    if (C < 1 || W < 1 || H < 1 || C % (W * H) != 0)
        return mk_fail(MK_ERR_VALUE,
                       "move_hidden: C must be a positive multiple of W H, got C = %lld, W = "
                       "%lld, H = %lld",
                       (long long)C, (long long)W, (long long)H);
    if (D < 0 || D > MK_MOVE_HIDDEN_MAX_D)
        return mk_fail(MK_ERR_VALUE, "move_hidden: D must be in [0, %d] on the GPU, got %lld",
                       MK_MOVE_HIDDEN_MAX_D, (long long)D);
    const int threads = forward_threads(L, D);
    const size_t prod = products_bytes(threads, D); /* <= 16 KB */
    const bool smem = prod + (size_t)T * sizeof(int64_t) <= MK_SMEM_MAX_BYTES;
    auto kernel = smem ? move_hidden_forward_kernel<true> : move_hidden_forward_kernel<false>;
    kernel<<<(unsigned)(B < 65535LL * 16 ? B : 65535LL * 16), threads,
             prod + (smem ? (size_t)T * sizeof(int64_t) : 0), MK_STREAM(stream)>>>(
            relative, class_rows, out, out_stride, tokens, token_stride, legal, counts, B, T, L, C,
            W, H, K, D, pre, logits);
    MK_CUDA_LAUNCHED("move_hidden_forward_kernel");
done:
    return status;
}
