/* The emulator's scheduler: see include/emu.h. */
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
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
    std::map<std::string, std::vector<float4>> statics; /* `__shared__ T name[N]` per block */
    size_t static_bytes; /* their sizes summed: they share the per-block limit with `shared` */
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
void *static_shared(const char *name, size_t bytes) {
    std::vector<float4> &mem = blk.statics[name];
    if (mem.empty()) {
        mem.assign(bytes / sizeof(float4) + 1, float4{NAN, NAN, NAN, NAN});
        blk.static_bytes += bytes;
    }
    return mem.data();
}
void sync_block() { yield(AT_BLOCK_BARRIER); }

/* A thread's linear index in its block (x fastest, as warps are formed on a GPU). */
static unsigned linear_tid(const thread_view &v) {
    return v.thread.x + v.block_dim.x * (v.thread.y + v.block_dim.y * v.thread.z);
}

float shuffle_xor(float v, int offset) {
    unsigned tid = linear_tid(*current), base = tid / 32 * 32;
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
    mk_emu_land_copies(); /* device work after a copy sees it */
    const unsigned threads = block.x * block.y * block.z;
    const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    if (blocks == 0 || threads == 0 || threads > 1024 || threads % 32 || shared_bytes > 48 * 1024) {
        last_error = cudaErrorInvalidValue; /* what a real launch would refuse */
        return;
    }
    blk.kernel = &kernel;
    blk.fibers.assign(threads, fiber());
    while (blk.stacks.size() < threads) blk.stacks.emplace_back(new char[STACK]);
    blk.exchange.assign(threads, 0.0f);
    for (unsigned long long b = 0; b < blocks; b++) {
        const dim3 block_id((unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                            (unsigned)(b / ((unsigned long long)grid.x * grid.y)));
        blk.shared.assign(shared_bytes / sizeof(float4) + 1, float4{NAN, NAN, NAN, NAN});
        blk.statics.clear();
        blk.static_bytes = 0;
        for (unsigned t = 0; t < threads; t++) {
            fiber &f = blk.fibers[t];
            f.view = {dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y)), block_id,
                      block, grid};
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
                fprintf(stderr, "mk_emu: deadlock in block %llu: threads wait at barriers others never reach\n", b);
                abort();
            }
        }
        /* Static and dynamic shared memory count against the same 48 KB per block. The
         * static size is known only once a block has declared its arrays, so the first
         * block has run by then (a GPU would have launched nothing): the error is what
         * matters, as MK_CUDA_LAUNCHED reports it. */
        if (shared_bytes + blk.static_bytes > 48 * 1024) {
            last_error = cudaErrorInvalidValue;
            break;
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

/* ---------------------------------------------------------------- device memory */
static std::map<const char *, size_t> allocations; /* start -> size */
/* Strict: memsets and copies must touch "device" memory where a GPU would need it. Off for
 * the kernel tests, which hand the launchers NumPy buffers as device memory. */
static bool strict = false;
extern "C" void mk_emu_strict(int on) { strict = on != 0; }

/* [p, p + n) lies inside one of `blocks` (start -> size). */
static bool within(const std::map<const char *, size_t> &blocks, const void *p, size_t n) {
    auto it = blocks.upper_bound((const char *)p);
    if (it == blocks.begin()) return false;
    --it;
    return (const char *)p >= it->first && (const char *)p + n <= it->first + it->second;
}
static bool on_device(const void *p, size_t n) { return within(allocations, p, n); }

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t) {
    *p = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xA5, bytes); /* garbage, like fresh device memory */
    allocations[(const char *)*p] = bytes;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) { return cudaMallocAsync(p, bytes, nullptr); }

/* Pinned host memory is plain host memory, remembered so that copies from it can be made
 * asynchronous as on a GPU: with mk_emu_defer_pinned(1) a host-to-device copy from pinned
 * memory reads its source only when it lands (the next synchronisation or device work),
 * so a caller that reuses the source before then is caught. Off by default: the emulated
 * cuBLAS (cublas_emu.c) reads device memory directly and could not land them first. */
static std::map<const char *, size_t> pinned; /* start -> size */
static bool defer_pinned = false;
struct pending_copy {
    void *dst;
    const void *src;
    size_t bytes;
};
static std::vector<pending_copy> pending;
extern "C" void mk_emu_defer_pinned(int on) { defer_pinned = on != 0; }
void mk_emu_land_copies(void) {
    for (const pending_copy &c : pending) memcpy(c.dst, c.src, c.bytes);
    pending.clear();
}
extern "C" void mk_emu_synchronize(void) { mk_emu_land_copies(); }

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) {
    *p = std::malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    pinned[(const char *)*p] = bytes;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    mk_emu_land_copies();
    pinned.erase((const char *)p);
    std::free(p);
    return cudaSuccess;
}
/* For tests: pinned memory, as cudaHostAlloc gives it (freed with mk_emu_free_pinned). */
extern "C" void *mk_emu_alloc_pinned(size_t bytes) {
    void *p = nullptr;
    return cudaHostAlloc(&p, bytes, 0) == cudaSuccess ? p : nullptr;
}
extern "C" void mk_emu_free_pinned(void *p) { cudaFreeHost(p); }

cudaError_t cudaFreeAsync(void *p, cudaStream_t) {
    mk_emu_land_copies();
    auto it = allocations.find((const char *)p);
    if (it == allocations.end()) return cudaErrorInvalidValue;
    allocations.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) { return p ? cudaFreeAsync(p, nullptr) : cudaSuccess; }

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    mk_emu_land_copies();
    if (strict && !on_device(p, n)) return cudaErrorInvalidValue;
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind kind, cudaStream_t) {
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if (strict && (on_device(s, n) != src_dev || on_device(d, n) != dst_dev)) return cudaErrorInvalidValue;
    if (defer_pinned && kind == cudaMemcpyHostToDevice && within(pinned, s, n)) {
        pending.push_back({d, s, n}); /* lands after those queued before it, in order */
        return cudaSuccess;
    }
    mk_emu_land_copies();
    memcpy(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind kind) {
    cudaError_t err = cudaMemcpyAsync(d, s, n, kind, nullptr);
    mk_emu_land_copies(); /* returns once the copy is done */
    return err;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p) {
    bool dev = on_device(p, 1);
    attr->type = dev ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    attr->device = dev ? 0 : -2;
    attr->devicePointer = dev ? (void *)p : nullptr;
    attr->hostPointer = nullptr;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}
/* The current device: 0 unless a test switches it (only events care, see cuda_runtime.h). */
static int current_device = 0;
extern "C" void mk_emu_set_device(int device) { current_device = device; }
cudaError_t cudaGetDevice(int *device) {
    *device = current_device;
    return cudaSuccess;
}

struct CUevent_st {
    int device;
};
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new CUevent_st{current_device};
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    return e->device == current_device ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int) {
    snprintf(prop->name, sizeof prop->name, "mk_emu (CPU emulation of a CUDA device)");
    return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props) {
    const char *env = getenv("MK_EMU_POOLS");
    if ((env && env[0] == '0') || props->location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
    *pool = (cudaMemPool_t)0x20;
    return cudaSuccess;
}

/* The layout of the structs tests/cuda/test_cuda_emulated.py mirrors with ctypes, as this
 * compiler laid them out: "struct size field=offset ...", one struct a line, so a field
 * added in C fails that test's layout check instead of shifting the ones after it. */
#include <cstddef>

#include "runtime.h"

extern "C" const char *mk_emu_layout(void) {
    static char text[1024];
    int n = 0;
#define MK_AT(type, f) #f, offsetof(type, f)
    n += snprintf(text + n, sizeof text - n, "mk_fault %zu %s=%zu %s=%zu %s=%zu %s=%zu %s=%zu %s=%zu\n",
                  sizeof(mk_fault), MK_AT(mk_fault, kind), MK_AT(mk_fault, index), MK_AT(mk_fault, slot),
                  MK_AT(mk_fault, count), MK_AT(mk_fault, value), MK_AT(mk_fault, real));
    snprintf(text + n, sizeof text - n,
             "mk_check %zu" " %s=%zu %s=%zu %s=%zu %s=%zu %s=%zu %s=%zu" " %s=%zu %s=%zu %s=%zu %s=%zu %s=%zu %s=%zu\n",
             sizeof(mk_check), MK_AT(mk_check, tokens), MK_AT(mk_check, n_tokens), MK_AT(mk_check, V),
             MK_AT(mk_check, legal), MK_AT(mk_check, counts), MK_AT(mk_check, B), MK_AT(mk_check, L),
             MK_AT(mk_check, M), MK_AT(mk_check, min_count), MK_AT(mk_check, target), MK_AT(mk_check, value),
             MK_AT(mk_check, policy_target));
#undef MK_AT
    return text;
}
