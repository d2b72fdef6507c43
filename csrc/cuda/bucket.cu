/* Stable grouping by key with CUB's radix sort; see bucket.cuh. */
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "bucket.cuh"

static __global__ void iota_kernel(int32_t *ids, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ids[i] = (int32_t)i;
}

/* starts[k] = first position of sorted_keys holding a key >= k (a lower bound). */
static __global__ void bucket_starts_kernel(const uint32_t *sorted_keys, int64_t n,
                                            int32_t num_keys, int32_t *starts) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k <= num_keys;
         k += (int64_t)gridDim.x * blockDim.x) {
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

mk_status mk_buckets_alloc(mk_buckets *bk, int64_t n, int64_t num_keys, cudaStream_t stream) {
    mk_status status = MK_OK;
    memset(bk, 0, sizeof *bk);
    if (n < 0 || n >= INT32_MAX || num_keys < 0 || num_keys >= INT32_MAX)
        return mk_fail(MK_ERR_VALUE,
                       "the CUDA backend groups at most 2^31 - 1 entries over 2^31 - 1 rows "
                       "(got %lld entries, %lld rows)",
                       (long long)n, (long long)num_keys);
    bk->n = n;
    bk->num_keys = (int32_t)num_keys;
    size_t words = (size_t)(n > 0 ? n : 1);
    MK_CUDA_TRY(mk_workspace_alloc((void **)&bk->keys, words * sizeof(uint32_t), stream));
    MK_CUDA_TRY(mk_workspace_alloc((void **)&bk->sorted_keys, words * sizeof(uint32_t), stream));
    MK_CUDA_TRY(mk_workspace_alloc((void **)&bk->ids, words * sizeof(int32_t), stream));
    MK_CUDA_TRY(mk_workspace_alloc((void **)&bk->order, words * sizeof(int32_t), stream));
    MK_CUDA_TRY(mk_workspace_alloc((void **)&bk->starts, ((size_t)num_keys + 1) * sizeof(int32_t),
                                stream));
    MK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, bk->temp_bytes, bk->keys, bk->sorted_keys,
                                                bk->ids, bk->order, (int)words, 0,
                                                key_bits(bk->num_keys), stream));
    MK_CUDA_TRY(mk_workspace_alloc(&bk->temp, bk->temp_bytes ? bk->temp_bytes : 1, stream));
done:
    if (status != MK_OK) mk_buckets_free(bk, stream);
    return status;
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

mk_status mk_buckets_free(mk_buckets *bk, cudaStream_t stream) {
    mk_status status = MK_OK;
    void *buffers[] = {bk->keys, bk->sorted_keys, bk->ids, bk->order, bk->starts, bk->temp};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        cudaError_t err = buffers[i] ? mk_workspace_free(buffers[i], stream) : cudaSuccess;
        if (err != cudaSuccess && status == MK_OK)
            status = mk_cuda_error(err, "mk_workspace_free(bucket buffer)", __FILE__, __LINE__);
    }
    memset(bk, 0, sizeof *bk);
    return status;
}
