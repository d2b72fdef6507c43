/* Runs csrc/cuda's kernels on the CPU, for tests on machines without a GPU. The threads
 * of a block are fibers (ucontext) on one OS thread, switched at __syncthreads (a block
 * barrier) and at warp shuffles (a warp barrier); blocks run one after another. The
 * schedule is deterministic, so even atomicAdd sums come out the same every run here.
 * Included before each kernel file (build.py rewrites `kernel<<<...>>>(args)` into
 * mk_emu::launch and `extern __shared__ T name[]` into a pointer to the block's buffer).
 * This checks the kernels' indexing, synchronisation and arithmetic, not GPU specifics
 * (memory model, alignment faults, resource limits, real concurrency). */
#ifndef MK_EMU_H
#define MK_EMU_H
#include <cmath>
#include <cstring>
#include <functional>

#include <cuda_runtime.h>

using std::isfinite;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict

namespace mk_emu {
struct thread_view {
    dim3 thread, block, block_dim, grid_dim;
};
extern thread_view *current; /* the fiber running now */
void launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            const std::function<void()> &kernel);
void *shared_mem();
/* The block's copy of a statically sized `__shared__` array (build.py rewrites them). */
void *static_shared(const char *name, size_t bytes);
void sync_block();
float shuffle_xor(float v, int offset);
}  // namespace mk_emu

#define threadIdx (mk_emu::current->thread)
#define blockIdx (mk_emu::current->block)
#define blockDim (mk_emu::current->block_dim)
#define gridDim (mk_emu::current->grid_dim)

inline void __syncthreads() { mk_emu::sync_block(); }
inline float __shfl_xor_sync(unsigned, float v, int offset) { return mk_emu::shuffle_xor(v, offset); }
inline int __shfl_xor_sync(unsigned mask, int v, int offset) { /* through the float lane, bit for bit */
    float f;
    std::memcpy(&f, &v, sizeof f);
    f = __shfl_xor_sync(mask, f, offset);
    std::memcpy(&v, &f, sizeof v);
    return v;
}
template <typename T> inline T __ldg(const T *p) { return *p; }
/* IEEE round-to-nearest arithmetic intrinsics: plain operations on the host (compiled
 * with -std=c++20, so GCC does not contract them into FMAs). */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

/* One OS thread runs everything: plain read-modify-writes are atomic here. */
inline float atomicAdd(float *p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}
inline int atomicCAS(int *p, int compare, int value) {
    int old = *p;
    if (old == compare) *p = value;
    return old;
}
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}
#endif
