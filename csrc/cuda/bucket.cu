/* Stable grouping by key with CUB's radix sort; see bucket.cuh. */
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "bucket.cuh"

static __global__ void iota_kernel(int32_t *ids, int64_t n) {
    MK_GRID_STRIDE(i, n)
        ids[i] = (int32_t)i;
}

/* starts[k] = first position of sorted_keys holding a key >= k (a lower bound). */
static __global__ void bucket_starts_kernel(const uint32_t *sorted_keys, int64_t n,
                                            int32_t num_keys, int32_t *starts) {
    MK_GRID_STRIDE(k, (int64_t)num_keys + 1) {
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (sorted_keys[mid] < (uint32_t)k) lo = mid + 1;
            else hi = mid;
        }
        starts[k] = (int32_t)lo;
    }
}

static int key_bits(int32_t num_keys) {
    int bits = 1;
    while (bits < 32 && ((uint32_t)num_keys >> bits) != 0) bits++;
    return bits;
}

/* Every buffer starts on a 256-byte boundary, as it would from its own cudaMalloc: the
 * kernels and CUB see the same alignment on the arena's scratch as on the pool's. */
#define BUCKET_ALIGN ((size_t)256)
static size_t round_up(size_t bytes) { return (bytes + BUCKET_ALIGN - 1) / BUCKET_ALIGN * BUCKET_ALIGN; }

/* The layout behind mk_buckets_bytes and mk_buckets_carve, computed in one place: CUB's
 * scratch for sorting n (at least 1) entries on the key's bits, and the total. */
static mk_status bucket_sizes(int64_t n, int64_t num_keys, size_t *temp_bytes, size_t *total) {
    mk_status status = MK_OK;
    *temp_bytes = *total = 0;
    if (n < 0 || n >= INT32_MAX || num_keys < 0 || num_keys >= INT32_MAX)
        return mk_fail(MK_ERR_VALUE,
                       "the CUDA backend groups at most 2^31 - 1 entries over 2^31 - 1 rows "
                       "(got %lld entries, %lld rows)",
                       (long long)n, (long long)num_keys);
    const size_t words = (size_t)(n > 0 ? n : 1);
    MK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, *temp_bytes, (const uint32_t *)NULL,
                                                (uint32_t *)NULL, (const int32_t *)NULL,
                                                (int32_t *)NULL, (int)words, 0,
                                                key_bits((int32_t)num_keys)));
    /* keys, sorted_keys, ids, order; starts; CUB's scratch; slack to align the base */
    *total = 4 * round_up(words * 4) + round_up(((size_t)num_keys + 1) * 4) +
             round_up(*temp_bytes ? *temp_bytes : 1) + BUCKET_ALIGN - 1;
done:
    return status;
}

mk_status mk_buckets_bytes(int64_t n, int64_t num_keys, size_t *bytes) {
    size_t temp_bytes;
    return bucket_sizes(n, num_keys, &temp_bytes, bytes);
}

mk_status mk_buckets_carve(mk_buckets *bk, int64_t n, int64_t num_keys, void *work,
                           size_t work_bytes, const char *op) {
    size_t temp_bytes, need;
    memset(bk, 0, sizeof *bk);
    mk_status status = bucket_sizes(n, num_keys, &temp_bytes, &need);
    if (status != MK_OK) return status;
    if (!work || work_bytes < need)
        return mk_fail(MK_ERR_VALUE,
                       "%s: the scratch given holds %zu bytes; grouping %lld entries over %lld "
                       "keys needs %zu",
                       op, work ? work_bytes : (size_t)0, (long long)n, (long long)num_keys, need);
    const size_t words = round_up((size_t)(n > 0 ? n : 1) * 4);
    char *at = (char *)(((uintptr_t)work + BUCKET_ALIGN - 1) / BUCKET_ALIGN * BUCKET_ALIGN);
    bk->n = n;
    bk->num_keys = (int32_t)num_keys;
    bk->keys = (uint32_t *)at;
    bk->sorted_keys = (uint32_t *)(at += words);
    bk->ids = (int32_t *)(at += words);
    bk->order = (int32_t *)(at += words);
    bk->starts = (int32_t *)(at += words);
    bk->temp = at + round_up(((size_t)num_keys + 1) * 4);
    bk->temp_bytes = temp_bytes;
    return MK_OK;
}

mk_status mk_buckets_sort(mk_buckets *bk, cudaStream_t stream) {
    mk_status status = MK_OK;
    if (bk->n > 0) {
        iota_kernel<<<mk_blocks_for(bk->n, 256), 256, 0, stream>>>(bk->ids, bk->n);
        MK_CUDA_LAUNCHED("iota_kernel");
        MK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(bk->temp, bk->temp_bytes, bk->keys,
                                                    bk->sorted_keys, bk->ids, bk->order,
                                                    (int)bk->n, 0, key_bits(bk->num_keys),
                                                    stream));
    }
    bucket_starts_kernel<<<mk_blocks_for((int64_t)bk->num_keys + 1, 256), 256, 0, stream>>>(
        bk->sorted_keys, bk->n, bk->num_keys, bk->starts);
    MK_CUDA_LAUNCHED("bucket_starts_kernel");
done:
    return status;
}
