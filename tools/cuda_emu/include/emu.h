/* Runs csrc/cuda's kernels on the CPU, for tests on machines without a GPU: every CUDA
 * thread of a block is a std::thread, __syncthreads a block-wide barrier, a warp shuffle
 * an exchange between the 32 threads of a warp; blocks run one after another.
 * Included before each kernel file (translate.py rewrites `kernel<<<...>>>(args)` into
 * mk_emu::launch and `extern __shared__ T name[]` into a pointer to the block's buffer).
 * This checks the kernels' indexing, synchronisation and arithmetic, not GPU specifics
 * (memory model, alignment faults, resource limits). */
#ifndef MK_EMU_H
#define MK_EMU_H
#include <atomic>
#include <barrier>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict

namespace mk_emu {
struct block_state {
    std::barrier<> *block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    std::vector<float> exchange; /* one float per thread for shuffles */
    void *shared;
};
extern thread_local dim3 t_thread, t_block, t_block_dim, t_grid_dim;
extern thread_local block_state *t_state;
void launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            const std::function<void()> &kernel);
inline void *shared_mem() { return t_state->shared; }
}  // namespace mk_emu

#define threadIdx (mk_emu::t_thread)
#define blockIdx (mk_emu::t_block)
#define blockDim (mk_emu::t_block_dim)
#define gridDim (mk_emu::t_grid_dim)

inline void __syncthreads() { mk_emu::t_state->block->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int offset) {
    unsigned tid = threadIdx.x, warp = tid / 32;
    mk_emu::t_state->exchange[tid] = v;
    mk_emu::t_state->warps[warp]->arrive_and_wait();
    float other = mk_emu::t_state->exchange[warp * 32 + ((tid % 32) ^ (unsigned)offset)];
    mk_emu::t_state->warps[warp]->arrive_and_wait();
    return other;
}

template <typename T> inline T __ldg(const T *p) { return *p; }

inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    std::atomic_ref<unsigned long long> a(*p);
    unsigned long long old = a.load();
    while (v < old && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
#endif
