/* Shared by every CUDA op: error checking that never aborts, launch sizing, and the
 * stream convention.
 *
 * Errors: every CUDA call and every launch goes through MK_CUDA_TRY, which records
 * "file:line: call: error name (error string)" with mk_fail and makes the launcher
 * return MK_ERR_RUNTIME. Launchers that allocate workspace declare every variable before
 * the first MK_CUDA_TRY and clean up at one `done:` label (C++ forbids jumping over
 * initialisations).
 *
 * Streams: `void *stream` is a cudaStream_t; NULL is the legacy default stream. Every
 * launcher only enqueues work on `stream` (workspace comes from the stream-ordered
 * allocator), so nothing here synchronises the host unless it says so. */
#ifndef MANAKA_CUDA_COMMON_CUH
#define MANAKA_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "core/manaka.h"

static inline mk_status mk_cuda_error(cudaError_t err, const char *what, const char *file,
                                      int line) {
    return mk_fail(MK_ERR_RUNTIME, "CUDA error at %s:%d in %s: %s (%s)", file, line, what,
                   cudaGetErrorName(err), cudaGetErrorString(err));
}

/* For launchers with a `mk_status status` and a `done:` cleanup label. */
#define MK_CUDA_TRY(call)                                                      \
    do {                                                                       \
        cudaError_t mk_err_ = (call);                                          \
        if (mk_err_ != cudaSuccess) {                                          \
            status = mk_cuda_error(mk_err_, #call, __FILE__, __LINE__);        \
            goto done;                                                         \
        }                                                                      \
    } while (0)

/* Kernel launches made by manaka (plus cuBLAS calls), for the step benchmark's
 * "launches per step": a process-wide counter, relaxed atomic, never read on a hot path. */
extern "C" unsigned long long mk_cuda_launches;
#define MK_CUDA_COUNT_LAUNCH() __atomic_fetch_add(&mk_cuda_launches, 1ull, __ATOMIC_RELAXED)

/* Device memory allocations made by manaka (cudaMalloc and the workspace pool), for the
 * test that a training step allocates nothing once its model's arena is sized: a
 * process-wide counter like the launch count, read through manaka._cuda.alloc_count(). */
extern "C" unsigned long long mk_cuda_allocations;
#define MK_CUDA_COUNT_ALLOC() __atomic_fetch_add(&mk_cuda_allocations, 1ull, __ATOMIC_RELAXED)

/* Checks the launch just made (bad configuration, no kernel image for this GPU) and
 * counts it. */
#define MK_CUDA_LAUNCHED(name)                                                 \
    do {                                                                       \
        MK_CUDA_COUNT_LAUNCH();                                                \
        cudaError_t mk_err_ = cudaGetLastError();                              \
        if (mk_err_ != cudaSuccess) {                                          \
            status = mk_cuda_error(mk_err_, "launch of " name, __FILE__, __LINE__); \
            goto done;                                                         \
        }                                                                      \
    } while (0)

/* For launchers without cleanup: returns from the function on error. */
#define MK_CUDA_RETURN_IF(call)                                                \
    do {                                                                       \
        cudaError_t mk_err_ = (call);                                          \
        if (mk_err_ != cudaSuccess) return mk_cuda_error(mk_err_, #call, __FILE__, __LINE__); \
    } while (0)

#define MK_STREAM(s) ((cudaStream_t)(s))

/* A grid-stride loop: the threads of the grid share out i = 0 .. n - 1 (n evaluated each
 * turn, so keep it cheap), sized by mk_blocks_for. */
#define MK_GRID_STRIDE(i, n)                                                   \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);  \
         i += (int64_t)gridDim.x * blockDim.x)

/* Blocks for a grid-stride loop over n items: enough to fill the GPU, never zero, and
 * within gridDim.x's limit. */
static inline unsigned int mk_blocks_for(int64_t n, int threads) {
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    return (unsigned int)blocks;
}

/* Shared memory per block, static plus dynamic, without an opt-in. */
#define MK_SMEM_MAX_BYTES (48 * 1024)

/* Block size for a kernel whose threads own columns: one pass over `cols` columns in whole
 * warps, clamped to [lo, hi]. */
static inline int mk_column_threads(int64_t cols, int lo, int hi) {
    int64_t t = (cols + 31) / 32 * 32;
    return (int)(t < lo ? lo : t > hi ? hi : t);
}

/* `p` may be read as float4. */
static inline bool mk_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Sum over a warp, lanes combined in a fixed tree, so the result is reproducible. */
__device__ __forceinline__ float mk_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/* Max over the warp, ties resolved towards the smaller index (the CPU's "first maximum"). */
__device__ __forceinline__ void mk_warp_argmax(float &value, int &index) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, value, offset);
        int i = __shfl_xor_sync(0xffffffffu, index, offset);
        if (v > value || (v == value && i < index)) value = v, index = i;
    }
}

/* row . h over a warp (W floats each), summed with mk_warp_sum: lanes stride the columns,
 * as float4 when VEC (W % 4 == 0 and both pointers 16-byte aligned). GatherDot's forward
 * and the fused policy head both use it, so their logits are the same bits. */
template <bool VEC>
__device__ __forceinline__ float mk_warp_row_dot(const float *__restrict__ row,
                                                 const float *h, int W, int lane) {
    float acc = 0.0f;
    if (VEC) {
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
        const float4 *h4 = reinterpret_cast<const float4 *>(h);
        for (int c = lane; c < W / 4; c += 32) {
            float4 a = __ldg(r4 + c), x = h4[c];
            acc += a.x * x.x + a.y * x.y + a.z * x.z + a.w * x.w;
        }
    } else {
        for (int w = lane; w < W; w += 32) acc += __ldg(row + w) * h[w];
    }
    return mk_warp_sum(acc);
}

/* The cross-entropy's gradient at legal slot l of a row with log-sum-exp `lse`: softmax
 * minus the target (pi[l] for soft targets, else one-hot at t), times grad_scale.
 * softmax_xent (loss.cu) and the fused policy head both use it: the same bits. */
__device__ __forceinline__ float mk_xent_grad(float x, float lse, const float *pi, int t,
                                              int64_t l, float grad_scale) {
    float y = pi ? pi[l] : (l == t ? 1.0f : 0.0f);
    return grad_scale * (expf(x - lse) - y);
}

#endif
