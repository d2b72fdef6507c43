/* CPU stand-in for cub::DeviceRadixSort::SortPairs: a stable sort on bits
 * [begin_bit, end_bit) of the keys, the contract bucket.cu relies on. */
#ifndef MK_EMU_CUB_RADIX_H
#define MK_EMU_CUB_RADIX_H
#include <algorithm>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *values_in, V *values_out, int n, int begin_bit,
                                 int end_bit, cudaStream_t = nullptr) {
        if (!temp) {
            temp_bytes = 16;
            return cudaSuccess;
        }
        const unsigned long long mask =
            (end_bit - begin_bit >= 64 ? ~0ULL : ((1ULL << (end_bit - begin_bit)) - 1)) << begin_bit;
        std::vector<int> order(n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return ((unsigned long long)keys_in[a] & mask) < ((unsigned long long)keys_in[b] & mask);
        });
        std::vector<K> k(n);
        std::vector<V> v(n);
        for (int i = 0; i < n; i++) {
            k[i] = keys_in[order[i]];
            v[i] = values_in[order[i]];
        }
        std::copy(k.begin(), k.end(), keys_out);
        std::copy(v.begin(), v.end(), values_out);
        return cudaSuccess;
    }
};
}  // namespace cub
#endif
