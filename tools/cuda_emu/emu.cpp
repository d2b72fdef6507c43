/* The emulator's launch: see include/emu.h. */
#include "emu.h"

namespace mk_emu {
thread_local dim3 t_thread, t_block, t_block_dim, t_grid_dim;
thread_local block_state *t_state;
static thread_local cudaError_t last_error = cudaSuccess;

void launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t, const std::function<void()> &kernel) {
    if (grid.x == 0 || block.x == 0 || block.x > 1024 || block.x % 32 || shared_bytes > 48 * 1024) {
        last_error = cudaErrorInvalidValue; /* what a real launch would refuse */
        return;
    }
    for (unsigned b = 0; b < grid.x; b++) {
        std::barrier<> barrier((std::ptrdiff_t)block.x);
        block_state state;
        state.block = &barrier;
        for (unsigned w = 0; w < block.x / 32; w++) state.warps.emplace_back(new std::barrier<>(32));
        state.exchange.assign(block.x, 0.0f);
        std::vector<float4> shared(shared_bytes / sizeof(float4) + 1);
        state.shared = shared.data();
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block.x; t++)
            threads.emplace_back([&, t] {
                t_thread = dim3(t);
                t_block = dim3(b);
                t_block_dim = block;
                t_grid_dim = grid;
                t_state = &state;
                kernel();
            });
        for (auto &th : threads) th.join();
    }
}
}  // namespace mk_emu

cudaError_t cudaGetLastError(void) {
    cudaError_t e = mk_emu::last_error;
    mk_emu::last_error = cudaSuccess;
    return e;
}
