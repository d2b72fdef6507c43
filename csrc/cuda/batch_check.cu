/* The batch check on the device (backend entry batch_check): mk_batch_find_fault's rules
 * for a batch whose arrays are already on the GPU, so a bad device batch is refused with
 * the host check's message before any step work reads it.
 *
 * Each rule keeps its first offending key with atomicMin (integer: the answer does not
 * depend on scheduling), all five keys in one small buffer (the caller's scratch: checking
 * allocates nothing) that is copied back once: the one device -> host read per device batch. Only when something was found are the few
 * values the message needs read back (the error path). Keys order faults as the host
 * loops do, so the first fault is the same:
 *   tokens   flat position
 *   legal    r (L + 1) + 0 for counts[r], r (L + 1) + l + 1 for legal[r, l]
 *   target, value   r
 *   soft     r (L + 1) + l for an entry, r (L + 1) + L for the row's sum */
#include "backend_cuda.h"
#include "common.cuh"

#define NONE 0xffffffffffffffffULL

enum { K_TOKEN = 0, K_LEGAL, K_TARGET, K_VALUE, K_SOFT, K_COUNT };

static __global__ void tokens_kernel(const int32_t *__restrict__ tokens, int64_t n, int64_t V,
                                     unsigned long long *key) {
    MK_GRID_STRIDE(x, n)
        if (tokens[x] < -1 || tokens[x] >= V) atomicMin(key, (unsigned long long)x);
}

static __global__ void legal_kernel(const int32_t *__restrict__ legal,
                                    const int32_t *__restrict__ counts, int64_t B, int64_t L,
                                    int64_t M, unsigned long long *key) {
    MK_GRID_STRIDE(x, B * (L + 1)) {
        const int64_t r = x / (L + 1), l = x % (L + 1) - 1, n = counts[r];
        const bool count_ok = n >= 1 && n <= L;
        bool bad = l < 0 ? !count_ok : count_ok && l < n && (legal[r * L + l] < 0 || legal[r * L + l] >= M);
        if (bad) atomicMin(key, (unsigned long long)x);
    }
}

/* One thread per row: target and value, and the soft row summed in order in double
 * precision, as the host does (the same sum, so the same verdict at the tolerance). Rows
 * with a bad count are skipped: the count's fault is reported first anyway. */
static __global__ void targets_kernel(const int32_t *__restrict__ counts,
                                      const int32_t *__restrict__ target,
                                      const float *__restrict__ value,
                                      const float *__restrict__ soft, int64_t B, int64_t L,
                                      unsigned long long *keys) {
    MK_GRID_STRIDE(r, B) {
        const int64_t n = counts[r];
        if (target[r] < 0 || target[r] >= n) atomicMin(&keys[K_TARGET], (unsigned long long)r);
        if (!(value[r] >= 0.0f && value[r] <= 1.0f)) atomicMin(&keys[K_VALUE], (unsigned long long)r);
        if (!soft || n < 1 || n > L) continue;
        double sum = 0.0;
        int64_t l = 0;
        for (; l < n; l++) {
            const float p = soft[r * L + l];
            if (!isfinite(p) || p < 0.0f) break;
            sum += p;
        }
        if (l < n) atomicMin(&keys[K_SOFT], (unsigned long long)(r * (L + 1) + l));
        else if (fabs(sum - 1.0) > MK_SOFT_TARGET_TOLERANCE)
            atomicMin(&keys[K_SOFT], (unsigned long long)(r * (L + 1) + L));
    }
}

/* One element of device array `src` at `index`, to the host (error path only). */
template <typename T>
static cudaError_t read_one(const T *src, int64_t index, T *out, cudaStream_t s) {
    cudaError_t err = cudaMemcpyAsync(out, src + index, sizeof *out, cudaMemcpyDeviceToHost, s);
    return err == cudaSuccess ? cudaStreamSynchronize(s) : err;
}

/* Fills *f from the first key found, reading the values its message names. */
static cudaError_t describe(const mk_batch *b, const unsigned long long *keys,
                            mk_batch_fault *f, cudaStream_t s) {
    const int64_t L = b->L;
    int32_t i32 = 0, n = 0;
    float f32 = 0.0f;
    cudaError_t err = cudaSuccess;
    if (keys[K_TOKEN] != NONE) {
        f->kind = MK_FAULT_TOKEN;
        f->index = (int64_t)keys[K_TOKEN];
        err = read_one(b->tokens, f->index, &i32, s);
        f->value = i32;
        return err;
    }
    if (keys[K_LEGAL] != NONE) {
        f->index = (int64_t)(keys[K_LEGAL] / (unsigned long long)(L + 1));
        f->slot = (int64_t)(keys[K_LEGAL] % (unsigned long long)(L + 1)) - 1;
        if ((err = read_one(b->counts, f->index, &n, s)) != cudaSuccess) return err;
        f->count = n;
        f->kind = f->slot < 0 ? MK_FAULT_COUNT : MK_FAULT_LEGAL;
        if (f->slot < 0) {
            f->slot = 0;
            f->value = n;
            return err;
        }
        err = read_one(b->legal, f->index * L + f->slot, &i32, s);
        f->value = i32;
        return err;
    }
    int kind = keys[K_TARGET] != NONE ? K_TARGET : keys[K_VALUE] != NONE ? K_VALUE : K_SOFT;
    unsigned long long key = keys[kind];
    f->index = kind == K_SOFT ? (int64_t)(key / (unsigned long long)(L + 1)) : (int64_t)key;
    if ((err = read_one(b->counts, f->index, &n, s)) != cudaSuccess) return err;
    f->count = n;
    if (kind == K_TARGET) {
        f->kind = MK_FAULT_TARGET;
        err = read_one(b->target, f->index, &i32, s);
        f->value = i32;
        return err;
    }
    if (kind == K_VALUE) {
        f->kind = MK_FAULT_VALUE;
        f->count = 0;
        err = read_one(b->value, f->index, &f32, s);
        f->value = f32;
        return err;
    }
    f->slot = (int64_t)(key % (unsigned long long)(L + 1));
    if (f->slot < L) {
        f->kind = MK_FAULT_SOFT_ENTRY;
        err = read_one(b->policy_target, f->index * L + f->slot, &f32, s);
        f->value = f32;
        return err;
    }
    /* the row's sum, recomputed on the host in the kernel's order (n floats) */
    f->kind = MK_FAULT_SOFT_SUM;
    f->slot = 0;
    float *row = (float *)malloc((size_t)n * sizeof(float));
    if (!row) return cudaErrorMemoryAllocation;
    err = cudaMemcpyAsync(row, b->policy_target + f->index * L, (size_t)n * sizeof(float),
                          cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    double sum = 0.0;
    for (int32_t l = 0; l < n; l++) sum += row[l];
    free(row);
    f->value = sum;
    return err;
}

extern "C" mk_status mk_batch_check_cuda(void *stream, const mk_batch *b, int64_t V, int64_t M,
                                         int with_targets, mk_batch_fault *fault, void *work,
                                         size_t work_bytes) {
    cudaStream_t s = MK_STREAM(stream);
    mk_status status = MK_OK;
    unsigned long long *keys = (unsigned long long *)work, host[K_COUNT];
    const int64_t B = b->B, L = b->L, n_tok = b->B * b->S * b->T;
    int any = 0;
    static_assert(sizeof host <= MK_BATCH_CHECK_WORK_BYTES, "batch_check's answer outgrew its scratch");
    *fault = (mk_batch_fault){MK_FAULT_NONE, 0, 0, 0, 0.0};
    if (!work || work_bytes < sizeof host || ((uintptr_t)work & 7))
        return mk_fail(MK_ERR_VALUE,
                       "batch_check: its scratch must be %zu bytes, 8-byte aligned (got %zu at %p)",
                       sizeof host, work ? work_bytes : (size_t)0, work);
    MK_CUDA_TRY(cudaMemsetAsync(keys, 0xff, sizeof host, s));
    tokens_kernel<<<mk_blocks_for(n_tok, 256), 256, 0, s>>>(b->tokens, n_tok, V, &keys[K_TOKEN]);
    MK_CUDA_LAUNCHED("tokens_kernel");
    legal_kernel<<<mk_blocks_for(B * (L + 1), 256), 256, 0, s>>>(b->legal, b->counts, B, L, M,
                                                                 &keys[K_LEGAL]);
    MK_CUDA_LAUNCHED("legal_kernel");
    if (with_targets) {
        targets_kernel<<<mk_blocks_for(B, 128), 128, 0, s>>>(b->counts, b->target, b->value,
                                                             b->policy_target, B, L, keys);
        MK_CUDA_LAUNCHED("targets_kernel");
    }
    /* the one read of a good batch: 40 bytes; waits for this stream only */
    MK_CUDA_TRY(cudaMemcpyAsync(host, keys, sizeof host, cudaMemcpyDeviceToHost, s));
    MK_CUDA_TRY(cudaStreamSynchronize(s));
    for (int k = 0; k < K_COUNT; k++) any |= host[k] != NONE;
    if (any) MK_CUDA_TRY(describe(b, host, fault, s));
done:
    return status;
}
