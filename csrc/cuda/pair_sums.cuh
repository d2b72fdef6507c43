/* The pair table's gradient as pair_sums.cu computes it, for a kernel that consumes it
 * element by element instead of storing it: the fused PairSums backward + AdamW of
 * adamw.cu. Both read the same buckets through the same sum, so the fused update sees
 * exactly the bits pair_sums_backward would have written. */
#ifndef MANAKA_CUDA_PAIR_SUMS_CUH
#define MANAKA_CUDA_PAIR_SUMS_CUH

#include "bucket.cuh"

/* The q-th pair (i < j) in the order j = 1.., i = 0..j-1: q = j (j - 1) / 2 + i. */
__device__ __forceinline__ void pair_of(int64_t q, int64_t *i, int64_t *j) {
    int64_t jj = (int64_t)((1.0 + sqrt(1.0 + 8.0 * (double)q)) / 2.0);
    while (jj * (jj - 1) / 2 > q) jj--;
    while ((jj + 1) * jj / 2 <= q) jj++;
    *j = jj;
    *i = q - jj * (jj - 1) / 2;
}

__device__ __forceinline__ int64_t pair_row(int32_t a, int32_t b) {
    int64_t lo = a < b ? a : b, hi = a < b ? b : a;
    return hi * (hi + 1) / 2 + lo;
}

/* Table element x = q P + c of the pair table's gradient: grad[row, c] summed over q's
 * entries in ascending row (the buckets' stable order). `pairs` is T (T - 1) / 2 (1 when
 * that is 0: no entry then). */
__device__ __forceinline__ float mk_pair_grad_element(const float *__restrict__ grad,
                                                      const int32_t *__restrict__ order,
                                                      const int32_t *__restrict__ starts,
                                                      int64_t pairs, int64_t P, int64_t x) {
    const int64_t q = x / P, c = x % P;
    float acc = 0.0f;
    for (int32_t j = starts[q]; j < starts[q + 1]; j++) acc += grad[(order[j] / pairs) * P + c];
    return acc;
}

/* Groups the (row, i < j) entries of tokens [rows, T] by pair-table row in `work` (at least
 * mk_pair_sums_backward_cuda_ws_bytes bytes, checked before any launch) and sorts them on
 * `s`, for mk_pair_grad_element. MK_ERR_VALUE naming `op` for sizes the kernels cannot
 * index. The caller returns early when num_pairs or P is 0. */
mk_status mk_pair_buckets_cuda(const char *op, const int32_t *tokens, int64_t rows, int64_t T,
                               int64_t P, int64_t num_pairs, void *work, size_t work_bytes,
                               cudaStream_t s, mk_buckets *bk);

#endif
