/* The emulator's scheduler: see include/emu.h. */
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "emu.h"

namespace mk_emu {
thread_view *current;
static thread_local cudaError_t last_error = cudaSuccess;

enum state { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
struct fiber {
    thread_view view;
    ucontext_t context;
    state st;
};
static const size_t STACK = 256 * 1024;
static struct {
    ucontext_t scheduler;
    std::vector<fiber> fibers;
    std::vector<std::unique_ptr<char[]>> stacks;
    std::vector<float> exchange;
    std::vector<float4> shared;
    const std::function<void()> *kernel;
    fiber *running;
} blk;

static void yield(state st) {
    fiber *self = blk.running;
    self->st = st;
    swapcontext(&self->context, &blk.scheduler);
}

static void trampoline() {
    (*blk.kernel)();
    yield(DONE);
}

void *shared_mem() { return blk.shared.data(); }
void sync_block() { yield(AT_BLOCK_BARRIER); }

float shuffle_xor(float v, int offset) {
    unsigned tid = current->thread.x, base = tid / 32 * 32;
    blk.exchange[tid] = v;
    yield(AT_WARP_BARRIER);
    float other = blk.exchange[base + ((tid % 32) ^ (unsigned)offset)];
    yield(AT_WARP_BARRIER); /* nobody overwrites exchange[] before every lane has read */
    return other;
}

/* Releases the barriers every live thread (of the block, or of a warp) has reached. */
static bool release() {
    size_t n = blk.fibers.size();
    bool block_ready = true, any = false;
    for (auto &f : blk.fibers)
        if (f.st != DONE && f.st != AT_BLOCK_BARRIER) block_ready = false;
    for (auto &f : blk.fibers)
        if (f.st == AT_BLOCK_BARRIER && block_ready) f.st = RUNNABLE, any = true;
    for (size_t w = 0; w < n; w += 32) {
        bool warp_ready = true, waiting = false;
        for (size_t t = w; t < w + 32 && t < n; t++) {
            if (blk.fibers[t].st == AT_WARP_BARRIER) waiting = true;
            else if (blk.fibers[t].st != DONE) warp_ready = false;
        }
        if (waiting && warp_ready)
            for (size_t t = w; t < w + 32 && t < n; t++)
                if (blk.fibers[t].st == AT_WARP_BARRIER) blk.fibers[t].st = RUNNABLE, any = true;
    }
    return any;
}

void launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t, const std::function<void()> &kernel) {
    if (grid.x == 0 || block.x == 0 || block.x > 1024 || block.x % 32 || shared_bytes > 48 * 1024) {
        last_error = cudaErrorInvalidValue; /* what a real launch would refuse */
        return;
    }
    blk.kernel = &kernel;
    blk.fibers.assign(block.x, fiber());
    while (blk.stacks.size() < block.x) blk.stacks.emplace_back(new char[STACK]);
    blk.exchange.assign(block.x, 0.0f);
    for (unsigned b = 0; b < grid.x; b++) {
        blk.shared.assign(shared_bytes / sizeof(float4) + 1, float4{NAN, NAN, NAN, NAN});
        for (unsigned t = 0; t < block.x; t++) {
            fiber &f = blk.fibers[t];
            f.view = {dim3(t), dim3(b), block, grid};
            f.st = RUNNABLE;
            getcontext(&f.context);
            f.context.uc_stack.ss_sp = blk.stacks[t].get();
            f.context.uc_stack.ss_size = STACK;
            f.context.uc_link = nullptr;
            makecontext(&f.context, trampoline, 0);
        }
        for (;;) {
            bool ran = false, live = false;
            for (auto &f : blk.fibers) {
                if (f.st == RUNNABLE) {
                    blk.running = &f;
                    current = &f.view;
                    swapcontext(&blk.scheduler, &f.context);
                    ran = true;
                }
                if (f.st != DONE) live = true;
            }
            if (!live) break;
            if (!ran && !release()) {
                fprintf(stderr, "mk_emu: deadlock in block %u: threads wait at barriers others never reach\n", b);
                abort();
            }
        }
    }
    current = nullptr;
}
}  // namespace mk_emu

cudaError_t cudaGetLastError(void) {
    cudaError_t e = mk_emu::last_error;
    mk_emu::last_error = cudaSuccess;
    return e;
}
