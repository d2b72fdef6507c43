/* Index range checks on the device, run by the binding before an op's kernels so that a
 * bad index is a Python ValueError with its position, never an out-of-bounds read.
 * Each check keeps the smallest offending key with atomicMin (integer: the answer does
 * not depend on scheduling), then copies that one word back. */
#include "runtime.h"
#include "workspace.cuh"

#define NONE 0xffffffffffffffffULL

/* Key x = b * (L + 1) + r: r = 0 checks counts[b], r = l + 1 checks indices[b, l]. So a
 * bad count at row b is reported before any index of row b, and rows in order: the same
 * first error as the CPU check's loops. */
static __global__ void check_legal_kernel(const int32_t *__restrict__ indices,
                                          const int32_t *__restrict__ counts, int64_t B,
                                          int64_t L, int64_t M, unsigned long long *first) {
    MK_GRID_STRIDE(x, B * (L + 1)) {
        const int64_t b = x / (L + 1), r = x % (L + 1);
        const int64_t n = counts ? counts[b] : L;
        bool bad;
        if (r == 0) bad = n < 0 || n > L;
        else if (n < 0 || n > L || r - 1 >= n) bad = false;
        else {
            const int32_t m = indices[b * L + r - 1];
            bad = m < 0 || m >= M;
        }
        if (bad) atomicMin(first, (unsigned long long)x);
    }
}

static __global__ void check_tokens_kernel(const int32_t *__restrict__ tokens, int64_t n,
                                           int64_t V, unsigned long long *first) {
    MK_GRID_STRIDE(x, n) {
        const int32_t t = tokens[x];
        if (t < -1 || t >= V) atomicMin(first, (unsigned long long)x);
    }
}

/* Narrowing copy; out-of-range elements are written as 0 and reported. */
template <typename T>
static __global__ void narrow_kernel(const T *__restrict__ src, int64_t n, int32_t *__restrict__ dst,
                                     unsigned long long *first) {
    MK_GRID_STRIDE(x, n) {
        const bool is_unsigned = (T)0 < (T)-1;
        const bool fits = is_unsigned ? (uint64_t)src[x] <= (uint64_t)INT32_MAX
                                      : (int64_t)src[x] >= INT32_MIN && (int64_t)src[x] <= INT32_MAX;
        dst[x] = fits ? (int32_t)src[x] : 0;
        if (!fits) atomicMin(first, (unsigned long long)x);
    }
}

/* Runs `launch` into a fresh word and returns the smallest key it recorded (NONE if none). */
template <typename Launch>
static mk_status first_bad(Launch launch, const char *name, cudaStream_t s,
                           unsigned long long *key) {
    unsigned long long *word = NULL;
    *key = NONE;
    mk_status status = mk_work_alloc((void **)&word, sizeof *word, s);
    if (status != MK_OK) return status;
    MK_CUDA_TRY(cudaMemsetAsync(word, 0xff, sizeof *word, s));
    launch(word);
    {
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) {
            status = mk_cuda_error(err, name, __FILE__, __LINE__);
            goto done;
        }
    }
    MK_CUDA_TRY(cudaMemcpyAsync(key, word, sizeof *word, cudaMemcpyDeviceToHost, s));
    MK_CUDA_TRY(cudaStreamSynchronize(s));
done:
    return mk_work_free(word, status, s);
}

static mk_status read_int(const int32_t *src, int32_t *value, cudaStream_t s) {
    mk_status status = MK_OK;
    MK_CUDA_TRY(cudaMemcpyAsync(value, src, sizeof *value, cudaMemcpyDeviceToHost, s));
    MK_CUDA_TRY(cudaStreamSynchronize(s));
done:
    return status;
}

extern "C" mk_status mk_check_legal_cuda(const int32_t *indices, const int32_t *counts, int64_t B,
                                         int64_t L, int64_t M, mk_bad_index *bad, void *stream) {
    cudaStream_t s = MK_STREAM(stream);
    unsigned long long key;
    mk_status status;
    memset(bad, 0, sizeof *bad);
    if (B == 0) return MK_OK;
    status = first_bad(
        [&](unsigned long long *word) {
            check_legal_kernel<<<mk_blocks_for(B * (L + 1), 256), 256, 0, s>>>(indices, counts, B,
                                                                               L, M, word);
        },
        "launch of check_legal_kernel", s, &key);
    if (status != MK_OK || key == NONE) return status;
    bad->found = 1;
    bad->b = (int64_t)(key / (unsigned long long)(L + 1));
    bad->l = (int64_t)(key % (unsigned long long)(L + 1)) - 1;
    if (bad->l < 0) return counts ? read_int(counts + bad->b, &bad->value, s) : MK_OK;
    bad->count = L;
    if (counts) {
        int32_t count;
        if ((status = read_int(counts + bad->b, &count, s)) != MK_OK) return status;
        bad->count = count;
    }
    return read_int(indices + bad->b * L + bad->l, &bad->value, s);
}

extern "C" mk_status mk_check_tokens_cuda(const int32_t *tokens, int64_t n, int64_t V,
                                          mk_bad_index *bad, void *stream) {
    cudaStream_t s = MK_STREAM(stream);
    unsigned long long key;
    mk_status status;
    memset(bad, 0, sizeof *bad);
    if (n == 0) return MK_OK;
    status = first_bad(
        [&](unsigned long long *word) {
            check_tokens_kernel<<<mk_blocks_for(n, 256), 256, 0, s>>>(tokens, n, V, word);
        },
        "launch of check_tokens_kernel", s, &key);
    if (status != MK_OK || key == NONE) return status;
    bad->found = 1;
    bad->flat = (int64_t)key;
    return read_int(tokens + bad->flat, &bad->value, s);
}

extern "C" mk_status mk_narrow_to_int32_cuda(const void *src, int itemsize, int is_signed,
                                             int64_t n, int32_t *dst, mk_bad_index *bad,
                                             void *stream) {
    cudaStream_t s = MK_STREAM(stream);
    unsigned long long key;
    mk_status status;
    memset(bad, 0, sizeof *bad);
    if (n == 0) return MK_OK;
    const unsigned blocks = mk_blocks_for(n, 256);
    auto launch = [&](unsigned long long *word) {
        if (itemsize == 1 && is_signed)
            narrow_kernel<<<blocks, 256, 0, s>>>((const int8_t *)src, n, dst, word);
        else if (itemsize == 1)
            narrow_kernel<<<blocks, 256, 0, s>>>((const uint8_t *)src, n, dst, word);
        else if (itemsize == 2 && is_signed)
            narrow_kernel<<<blocks, 256, 0, s>>>((const int16_t *)src, n, dst, word);
        else if (itemsize == 2)
            narrow_kernel<<<blocks, 256, 0, s>>>((const uint16_t *)src, n, dst, word);
        else if (itemsize == 4 && !is_signed)
            narrow_kernel<<<blocks, 256, 0, s>>>((const uint32_t *)src, n, dst, word);
        else if (itemsize == 8 && is_signed)
            narrow_kernel<<<blocks, 256, 0, s>>>((const int64_t *)src, n, dst, word);
        else
            narrow_kernel<<<blocks, 256, 0, s>>>((const uint64_t *)src, n, dst, word);
    };
    if (!(itemsize == 1 || itemsize == 2 || itemsize == 8 || (itemsize == 4 && !is_signed)))
        return mk_fail(MK_ERR_TYPE, "narrow: unsupported index item size %d", itemsize);
    status = first_bad(launch, "launch of narrow_kernel", s, &key);
    if (status != MK_OK || key == NONE) return status;
    bad->found = 1;
    bad->flat = (int64_t)key;
    uint64_t raw = 0; /* little-endian: the low itemsize bytes, then sign-extended */
    MK_CUDA_RETURN_IF(cudaMemcpyAsync(&raw, (const char *)src + key * itemsize, (size_t)itemsize,
                                      cudaMemcpyDeviceToHost, s));
    MK_CUDA_RETURN_IF(cudaStreamSynchronize(s));
    if (is_signed && itemsize < 8 && ((raw >> (itemsize * 8 - 1)) & 1)) raw |= ~0ULL << (itemsize * 8);
    bad->wide = (int64_t)raw;
    return MK_OK;
}
