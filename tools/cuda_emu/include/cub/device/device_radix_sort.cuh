/* CPU stand-in for cub::DeviceRadixSort::SortPairs: a stable sort on bits
 * [begin_bit, end_bit) of the keys, the contract bucket.cu relies on.
 *
 * Like the real one (whose non-DoubleBuffer form keeps alternate key and value buffers in
 * its scratch), it asks for scratch growing with n, refuses less, and uses all of it: the
 * sorted pairs are staged there. So a caller that carves CUB's scratch out of a larger
 * buffer (bucket.cu) is tested for giving it the whole size, at the place it said. */
#ifndef MK_EMU_CUB_RADIX_H
#define MK_EMU_CUB_RADIX_H
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *values_in, V *values_out, int n, int begin_bit,
                                 int end_bit, cudaStream_t = nullptr) {
        const size_t need = 64 + (size_t)n * (sizeof(K) + sizeof(V));
        if (!temp) {
            temp_bytes = need;
            return cudaSuccess;
        }
        if (temp_bytes < need) return cudaErrorInvalidValue;
        const unsigned long long mask =
            (end_bit - begin_bit >= 64 ? ~0ULL : ((1ULL << (end_bit - begin_bit)) - 1)) << begin_bit;
        std::vector<int> order(n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return ((unsigned long long)keys_in[a] & mask) < ((unsigned long long)keys_in[b] & mask);
        });
        char *stage = (char *)temp;
        std::memset(stage, 0xEE, temp_bytes); /* every byte it was given is CUB's to write */
        K *k = (K *)(stage + 64);
        V *v = (V *)(stage + 64 + (size_t)n * sizeof(K));
        for (int i = 0; i < n; i++) {
            std::memcpy(&k[i], &keys_in[order[i]], sizeof(K));
            std::memcpy(&v[i], &values_in[order[i]], sizeof(V));
        }
        std::memcpy(keys_out, k, (size_t)n * sizeof(K));
        std::memcpy(values_out, v, (size_t)n * sizeof(V));
        return cudaSuccess;
    }
};
}  // namespace cub
#endif
