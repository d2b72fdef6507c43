/* core/check.h's rules on the device: mk_find_fault for arrays that live on the GPU, so a
 * bad index is a ValueError with its position (ops) or a refused batch (the backend's
 * batch_check), never an out-of-bounds read, and the fault found is the one the host
 * check would find.
 *
 * Each rule keeps its first offending key with atomicMin (integer: the answer does not
 * depend on scheduling), all keys in one small buffer copied back at once: the one
 * device -> host read when nothing is wrong. Only when something was found are the few
 * values the message needs read back (the error path). Keys order faults as the host
 * loops do; describe() takes the first rule in check.h's order that found anything:
 *   token    flat position
 *   count    row
 *   legal    r L + l
 *   target, value   row
 *   soft     r (L + 1) + l for an entry, r (L + 1) + L for the row's sum
 * The same file narrows wider integer arrays to int32 for the GPU binding, reporting an
 * element that does not fit as an mk_fault too. */
#include "backend_cuda.h"
#include "runtime.h"
#include "workspace.cuh"

#define NONE 0xffffffffffffffffULL

enum { K_TOKEN = 0, K_COUNT, K_LEGAL, K_TARGET, K_VALUE, K_SOFT, K_KEYS };

static __global__ void tokens_kernel(const int32_t *__restrict__ tokens, int64_t n, int64_t V,
                                     unsigned long long *key) {
    MK_GRID_STRIDE(x, n)
        if (mk_bad_token(tokens[x], V)) atomicMin(key, (unsigned long long)x);
}

/* x = r (L + 1) + j: j = 0 judges counts[r], j = l + 1 legal[r, l], the latter only in a
 * row whose count is valid (a bad count anywhere is reported before any legal entry). */
static __global__ void legal_kernel(const int32_t *__restrict__ legal,
                                    const int32_t *__restrict__ counts, int64_t B, int64_t L,
                                    int64_t M, int64_t min_count, unsigned long long *keys) {
    MK_GRID_STRIDE(x, B * (L + 1)) {
        const int64_t r = x / (L + 1), l = x % (L + 1) - 1, n = counts ? counts[r] : L;
        const bool count_ok = n >= min_count && n <= L;
        if (l < 0) {
            if (!count_ok) atomicMin(&keys[K_COUNT], (unsigned long long)r);
        } else if (count_ok && l < n && mk_bad_index(legal[r * L + l], M)) {
            atomicMin(&keys[K_LEGAL], (unsigned long long)(r * L + l));
        }
    }
}

/* One thread per row: target and value, and the soft row summed in order in double
 * precision, as the host does (the same sum, so the same verdict at the tolerance). Rows
 * with a bad count are skipped for the soft row: the count's fault is reported first. */
static __global__ void targets_kernel(const int32_t *__restrict__ counts,
                                      const int32_t *__restrict__ target,
                                      const float *__restrict__ value,
                                      const float *__restrict__ soft, int64_t B, int64_t L,
                                      unsigned long long *keys) {
    MK_GRID_STRIDE(r, B) {
        const int64_t n = counts[r];
        if (target && mk_bad_index(target[r], n))
            atomicMin(&keys[K_TARGET], (unsigned long long)r);
        if (value && mk_bad_value(value[r]))
            atomicMin(&keys[K_VALUE], (unsigned long long)r);
        if (!soft || n < 1 || n > L) continue;
        double sum = 0.0;
        int64_t l = 0;
        for (; l < n; l++) {
            const float p = soft[r * L + l];
            if (mk_bad_soft_entry(p)) break;
            sum += p;
        }
        if (l < n) atomicMin(&keys[K_SOFT], (unsigned long long)(r * (L + 1) + l));
        else if (mk_bad_soft_sum(sum))
            atomicMin(&keys[K_SOFT], (unsigned long long)(r * (L + 1) + L));
    }
}

/* Narrowing copy; out-of-range elements are written as 0 and reported. */
template <typename T>
static __global__ void narrow_kernel(const T *__restrict__ src, int64_t n, int32_t *__restrict__ dst,
                                     unsigned long long *key) {
    MK_GRID_STRIDE(x, n) {
        const bool is_unsigned = (T)0 < (T)-1;
        const bool fits = is_unsigned ? (uint64_t)src[x] <= (uint64_t)INT32_MAX
                                      : (int64_t)src[x] >= INT32_MIN && (int64_t)src[x] <= INT32_MAX;
        dst[x] = fits ? (int32_t)src[x] : 0;
        if (!fits) atomicMin(key, (unsigned long long)x);
    }
}

/* One element of device array `src` at `index`, to the host (error path only). */
template <typename T>
static cudaError_t read_one(const T *src, int64_t index, T *out, cudaStream_t s) {
    cudaError_t err = cudaMemcpyAsync(out, src + index, sizeof *out, cudaMemcpyDeviceToHost, s);
    return err == cudaSuccess ? cudaStreamSynchronize(s) : err;
}

/* Fills *f from the first rule that found anything, reading the values its message names. */
static cudaError_t describe(const mk_check *c, const unsigned long long *keys, mk_fault *f,
                            cudaStream_t s) {
    const int64_t L = c->L;
    int32_t i32 = 0, n = (int32_t)L;
    float f32 = 0.0f;
    cudaError_t err = cudaSuccess;
    int kind = K_TOKEN;
    while (kind < K_KEYS && keys[kind] == NONE) kind++;
    if (kind == K_KEYS) return cudaSuccess;
    const unsigned long long key = keys[kind];
    if (kind == K_TOKEN) {
        f->kind = MK_FAULT_TOKEN;
        f->index = (int64_t)key;
        err = read_one(c->tokens, f->index, &i32, s);
        f->value = i32;
        return err;
    }
    f->index = kind == K_LEGAL ? (int64_t)(key / (unsigned long long)L)
             : kind == K_SOFT  ? (int64_t)(key / (unsigned long long)(L + 1))
                               : (int64_t)key;
    if (c->counts && (err = read_one(c->counts, f->index, &n, s)) != cudaSuccess) return err;
    switch (kind) {
    case K_COUNT:
        f->kind = MK_FAULT_COUNT;
        f->value = n;
        return err;
    case K_LEGAL:
        f->kind = MK_FAULT_LEGAL;
        f->slot = (int64_t)(key % (unsigned long long)L);
        f->count = n;
        err = read_one(c->legal, f->index * L + f->slot, &i32, s);
        f->value = i32;
        return err;
    case K_TARGET:
        f->kind = MK_FAULT_TARGET;
        f->count = n;
        err = read_one(c->target, f->index, &i32, s);
        f->value = i32;
        return err;
    case K_VALUE:
        f->kind = MK_FAULT_VALUE;
        err = read_one(c->value, f->index, &f32, s);
        f->real = f32;
        return err;
    }
    f->slot = (int64_t)(key % (unsigned long long)(L + 1));
    f->count = n;
    if (f->slot < L) {
        f->kind = MK_FAULT_SOFT_ENTRY;
        err = read_one(c->policy_target, f->index * L + f->slot, &f32, s);
        f->real = f32;
        return err;
    }
    /* the row's sum, recomputed on the host in the kernel's order (n floats) */
    f->kind = MK_FAULT_SOFT_SUM;
    f->slot = 0;
    float *row = (float *)malloc((size_t)n * sizeof(float));
    if (!row) return cudaErrorMemoryAllocation;
    err = cudaMemcpyAsync(row, c->policy_target + f->index * L, (size_t)n * sizeof(float),
                          cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    double sum = 0.0;
    for (int32_t l = 0; l < n; l++) sum += row[l];
    free(row);
    f->real = sum;
    return err;
}

/* The rules' kernels into `keys` (K_KEYS words, set to NONE first), then their answer. */
static mk_status find(const mk_check *c, mk_fault *f, unsigned long long *keys, cudaStream_t s) {
    mk_status status = MK_OK;
    unsigned long long host[K_KEYS];
    int any = 0;
    MK_CUDA_TRY(cudaMemsetAsync(keys, 0xff, sizeof host, s));
    if (c->tokens && c->n_tokens > 0) {
        tokens_kernel<<<mk_blocks_for(c->n_tokens, 256), 256, 0, s>>>(c->tokens, c->n_tokens,
                                                                      c->V, &keys[K_TOKEN]);
        MK_CUDA_LAUNCHED("tokens_kernel");
    }
    if (c->legal && c->B > 0) {
        legal_kernel<<<mk_blocks_for(c->B * (c->L + 1), 256), 256, 0, s>>>(
            c->legal, c->counts, c->B, c->L, c->M, c->min_count, keys);
        MK_CUDA_LAUNCHED("legal_kernel");
    }
    if (c->legal && c->counts && c->B > 0 && (c->target || c->value || c->policy_target)) {
        targets_kernel<<<mk_blocks_for(c->B, 128), 128, 0, s>>>(
            c->counts, c->target, c->value, c->policy_target, c->B, c->L, keys);
        MK_CUDA_LAUNCHED("targets_kernel");
    }
    /* the one read when all is well: K_KEYS words; waits for this stream only */
    MK_CUDA_TRY(cudaMemcpyAsync(host, keys, sizeof host, cudaMemcpyDeviceToHost, s));
    MK_CUDA_TRY(cudaStreamSynchronize(s));
    for (int k = 0; k < K_KEYS; k++) any |= host[k] != NONE;
    if (any) MK_CUDA_TRY(describe(c, host, f, s));
done:
    return status;
}

/* MK_OK when `work` can hold the keys (K_KEYS 8-byte words). */
static mk_status check_scratch(const char *who, const void *work, size_t work_bytes) {
    const size_t bytes = K_KEYS * sizeof(unsigned long long);
    static_assert(K_KEYS * sizeof(unsigned long long) <= MK_BATCH_CHECK_WORK_BYTES,
                  "the check's answer outgrew batch_check's scratch");
    if (work && work_bytes >= bytes && !((uintptr_t)work & 7)) return MK_OK;
    return mk_fail(MK_ERR_VALUE, "%s: its scratch must be %zu bytes, 8-byte aligned (got %zu at %p)",
                   who, bytes, work ? work_bytes : (size_t)0, work);
}

extern "C" mk_status mk_find_fault_cuda(const mk_check *check, mk_fault *fault, void *work,
                                        size_t work_bytes, void *stream) {
    cudaStream_t s = MK_STREAM(stream);
    mk_status status;
    *fault = (mk_fault){MK_FAULT_NONE, 0, 0, 0, 0, 0.0};
    if (work) {
        if ((status = check_scratch("check", work, work_bytes)) != MK_OK) return status;
        return find(check, fault, (unsigned long long *)work, s);
    }
    if ((status = mk_work_alloc(&work, K_KEYS * sizeof(unsigned long long), s)) != MK_OK)
        return status;
    return mk_work_free(work, find(check, fault, (unsigned long long *)work, s), s);
}

extern "C" mk_status mk_batch_check_cuda(void *stream, const mk_batch *b, int64_t V, int64_t M,
                                         int with_targets, mk_fault *fault, void *work,
                                         size_t work_bytes) {
    mk_status status = check_scratch("batch_check", work, work_bytes);
    mk_check rules = mk_batch_rules(b, V, M, with_targets);
    *fault = (mk_fault){MK_FAULT_NONE, 0, 0, 0, 0, 0.0};
    return status != MK_OK ? status : mk_find_fault_cuda(&rules, fault, work, work_bytes, stream);
}

extern "C" mk_status mk_narrow_to_int32_cuda(const void *src, int itemsize, int is_signed,
                                             int64_t n, int32_t *dst, mk_fault *fault,
                                             void *stream) {
    cudaStream_t s = MK_STREAM(stream);
    unsigned long long *word = NULL, key = NONE;
    mk_status status;
    *fault = (mk_fault){MK_FAULT_NONE, 0, 0, 0, 0, 0.0};
    if (n == 0) return MK_OK;
    if (!(itemsize == 1 || itemsize == 2 || itemsize == 8 || (itemsize == 4 && !is_signed)))
        return mk_fail(MK_ERR_TYPE, "narrow: unsupported index item size %d", itemsize);
    const unsigned blocks = mk_blocks_for(n, 256);
    if ((status = mk_work_alloc((void **)&word, sizeof *word, s)) != MK_OK) return status;
    MK_CUDA_TRY(cudaMemsetAsync(word, 0xff, sizeof *word, s));
    if (itemsize == 1 && is_signed)
        narrow_kernel<<<blocks, 256, 0, s>>>((const int8_t *)src, n, dst, word);
    else if (itemsize == 1)
        narrow_kernel<<<blocks, 256, 0, s>>>((const uint8_t *)src, n, dst, word);
    else if (itemsize == 2 && is_signed)
        narrow_kernel<<<blocks, 256, 0, s>>>((const int16_t *)src, n, dst, word);
    else if (itemsize == 2)
        narrow_kernel<<<blocks, 256, 0, s>>>((const uint16_t *)src, n, dst, word);
    else if (itemsize == 4)
        narrow_kernel<<<blocks, 256, 0, s>>>((const uint32_t *)src, n, dst, word);
    else if (is_signed)
        narrow_kernel<<<blocks, 256, 0, s>>>((const int64_t *)src, n, dst, word);
    else
        narrow_kernel<<<blocks, 256, 0, s>>>((const uint64_t *)src, n, dst, word);
    MK_CUDA_LAUNCHED("narrow_kernel");
    MK_CUDA_TRY(cudaMemcpyAsync(&key, word, sizeof key, cudaMemcpyDeviceToHost, s));
    MK_CUDA_TRY(cudaStreamSynchronize(s));
    if (key != NONE) {
        uint64_t raw = 0; /* little-endian: the low itemsize bytes, then sign-extended */
        MK_CUDA_TRY(cudaMemcpyAsync(&raw, (const char *)src + key * itemsize, (size_t)itemsize,
                                    cudaMemcpyDeviceToHost, s));
        MK_CUDA_TRY(cudaStreamSynchronize(s));
        if (is_signed && itemsize < 8 && ((raw >> (itemsize * 8 - 1)) & 1))
            raw |= ~0ULL << (itemsize * 8);
        *fault = (mk_fault){MK_FAULT_NARROW, (int64_t)key, 0, 0, (int64_t)raw, 0.0};
    }
done:
    return mk_work_free(word, status, s);
}
