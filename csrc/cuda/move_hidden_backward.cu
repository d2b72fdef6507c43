/* MoveHidden's backward on the GPU (math and summation orders: core/backend_ops.def,
 * move_hidden_backward; the forward and the contract: move_hidden.cu). Deterministic, no
 * float atomics; every sum is the def's sequence of float adds, so the bits are the CPU's.
 *
 * grad_out: each of its D sums runs over every legal slot of the batch in (b, l) order, a
 * chain of sum(counts) dependent adds that nothing can split. The legal slots are numbered
 * densely (an exclusive prefix of counts by one small block-scan kernel, then a kernel that
 * lists each slot at its number), and one block walks them in tiles: while its first warp
 * adds one tile's products G[b, l] max(pre, 0), column d by lane d, in slot order, the
 * other warps compute the next tile's into a second shared-memory buffer.
 *
 * grad_class and grad_relative: each entry ((b, l) for a class, (b, t, l) for a relative
 * row) is keyed by the row it adds to, the entries sorted by key with CUB's radix sort,
 * which is stable, so a row's entries stay in (b, l) or (b, t, l) order; a warp then adds
 * each run of equal keys in that order, lane d unit d. The entries of all B T L
 * triples would need gigabytes of scratch at training shapes (and pass 2^31), so the
 * positions go in chunks of at most MH_CHUNK_ENTRIES triples (fewer when the scratch given
 * is smaller than the query's: down to one position), in increasing b: both
 * gradients are zeroed first and each chunk continues every row's running sum where the
 * previous chunk left it, the same adds in the same order as one pass. The rows are found
 * as runs of the sorted keys (no per-row table), so the scratch depends only on B, T, L
 * (mk_step_shapes has no board size), not on the relative table's K (2W - 1) (2H - 1)
 * (C / S) rows.
 *
 * With a readout per position (out_stride D: out [B, D], the gated readout) grad_out is
 * [B, D] too, a thread per (b, d) adding its position's slots in ascending l.
 *
 * The adds of g = G[b, l] out[d] (0 where pre <= 0) onto a sum that starts from +0: a sum
 * from +0 is never -0, so adding 0 for a slot with pre <= 0 is exact, as is skipping it. */
#include <cub/device/device_radix_sort.cuh>

#include "backend_cuda.h"
#include "workspace.cuh"
#include "core/move_pair_board.h"

#define MH_ALIGN ((size_t)256)
/* triples (b, t, l) sorted at once: ~4 M, ~100 MB of keys, ids, order and CUB's buffers */
#define MH_CHUNK_ENTRIES ((int64_t)1 << 22)
#define MH_OUT_THREADS 256
/* entries of a run whose loads the scatter has in flight at once */
#define MH_DEPTH 8
/* shared memory of grad_out's two tiles of products (its D sums come on top: 16 KB at most) */
#define MH_OUT_SMEM 32768

static size_t mh_round_up(size_t bytes) { return (bytes + MH_ALIGN - 1) / MH_ALIGN * MH_ALIGN; }

static int key_bits(int64_t max_key) {
    int bits = 1;
    while (bits < 32 && ((uint64_t)max_key >> bits) != 0) bits++;
    return bits;
}

/* offsets[b] = sum of the counts before b (negative counts as 0), offsets[B] = the total:
 * one block, each thread summing a contiguous range, then a scan over the threads. */
static __global__ void move_hidden_offsets_kernel(const int32_t *__restrict__ counts, int64_t B,
                                                  int64_t L, int64_t *__restrict__ offsets) {
    __shared__ int64_t part[MH_OUT_THREADS];
    const int64_t tid = threadIdx.x, per = (B + blockDim.x - 1) / blockDim.x;
    const int64_t lo = tid * per < B ? tid * per : B, hi = lo + per < B ? lo + per : B;
    int64_t sum = 0;
    for (int64_t b = lo; b < hi; b++) sum += counts ? (counts[b] > 0 ? counts[b] : 0) : L;
    part[tid] = sum;
    __syncthreads();
    for (unsigned off = 1; off < blockDim.x; off <<= 1) { /* inclusive scan (Hillis-Steele) */
        const int64_t add = tid >= off ? part[tid - off] : 0;
        __syncthreads();
        part[tid] += add;
        __syncthreads();
    }
    int64_t run = tid ? part[tid - 1] : 0;
    for (int64_t b = lo; b < hi; b++) {
        offsets[b] = run;
        run += counts ? (counts[b] > 0 ? counts[b] : 0) : L;
    }
    if (tid == blockDim.x - 1) offsets[B] = part[tid];
}

/* slots[offsets[b] + l] = b L + l for every legal slot: the dense numbering grad_out walks. */
static __global__ void move_hidden_slots_kernel(const int32_t *__restrict__ counts,
                                                const int64_t *__restrict__ offsets, int64_t B,
                                                int64_t L, int64_t *__restrict__ slots) {
    MK_GRID_STRIDE(i, B * L) {
        const int64_t b = i / L, l = i - b * L;
        if (l < (counts ? counts[b] : L)) slots[offsets[b] + l] = i;
    }
}

/* grad_out, one block: warp 0 adds tile k - 1's products column by column (unit d: lane d,
 * d + 32, ...) while warps 1.. compute tile k's into the other buffer; a barrier per tile.
 * The consumer's add chain, sum(counts) adds per unit, is the floor the def's order sets. */
static __global__ void move_hidden_out_kernel(const float *__restrict__ grad,
                                              const float *__restrict__ pre,
                                              const int64_t *__restrict__ offsets,
                                              const int64_t *__restrict__ slots, int64_t B,
                                              int64_t D, int64_t tile,
                                              float *__restrict__ grad_out) {
    extern __shared__ float4 smem4[];
    float *prod = reinterpret_cast<float *>(smem4); /* [2][tile, D] */
    float *sums = prod + 2 * tile * D;              /* [D]: grad_out's running sums */
    const int64_t total = offsets[B], tiles = (total + tile - 1) / tile;
    const bool consumer = threadIdx.x < 32;
    const int64_t producer = (int64_t)threadIdx.x - 32, producers = (int64_t)blockDim.x - 32;
    if (consumer)
        for (int64_t d = threadIdx.x; d < D; d += 32) sums[d] = 0.0f;
    for (int64_t k = 0; k <= tiles; k++) {
        if (!consumer && k < tiles) {
            const int64_t f0 = k * tile, m = total - f0 < tile ? total - f0 : tile;
            float *buf = prod + (k % 2) * tile * D;
            for (int64_t j = producer; j < m * D; j += producers) {
                const int64_t e = j / D, bl = slots[f0 + e];
                const float p = pre[bl * D + (j - e * D)];
                buf[j] = __fmul_rn(grad[bl], p > 0.0f ? p : 0.0f);
            }
        }
        if (consumer && k > 0) {
            const int64_t f0 = (k - 1) * tile, m = total - f0 < tile ? total - f0 : tile;
            const float *buf = prod + ((k - 1) % 2) * tile * D;
            for (int64_t d = threadIdx.x; d < D; d += 32) {
                float acc = sums[d];
                for (int64_t e = 0; e < m; e++) acc = __fadd_rn(acc, buf[e * D + d]);
                sums[d] = acc;
            }
        }
        __syncthreads(); /* tile k is written, tile k - 1's buffer free again */
    }
    if (consumer)
        for (int64_t d = threadIdx.x; d < D; d += 32) grad_out[d] = sums[d];
}

/* grad_out [B, D] of a readout per position: thread (b, d) adds G[b, l] max(pre, 0) over
 * l < counts[b] in ascending order from +0. */
static __global__ void move_hidden_out_rows_kernel(const float *__restrict__ grad,
                                                   const float *__restrict__ pre,
                                                   const int32_t *__restrict__ counts, int64_t B,
                                                   int64_t L, int64_t D,
                                                   float *__restrict__ grad_out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < B * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / D, d = i - b * D, n = counts ? counts[b] : L;
        float acc = 0.0f;
        for (int64_t l = 0; l < n; l++) {
            const float p = pre[(b * L + l) * D + d];
            acc = __fadd_rn(acc, __fmul_rn(grad[b * L + l], p > 0.0f ? p : 0.0f));
        }
        grad_out[i] = acc;
    }
}

/* Entry e = (b - b0) L + l keyed by its class, or C (ignored) when padded. */
static __global__ void move_hidden_class_keys_kernel(const int32_t *__restrict__ legal,
                                                     const int32_t *__restrict__ counts,
                                                     int64_t b0, int64_t n, int64_t L, int64_t C,
                                                     uint32_t *__restrict__ keys,
                                                     int32_t *__restrict__ ids) {
    MK_GRID_STRIDE(e, n) {
        const int64_t b = b0 + e / L, l = e % L;
        const int64_t count = counts ? counts[b] : L;
        keys[e] = (uint32_t)(l < count ? legal[b * L + l] % C : C);
        ids[e] = (int32_t)e;
    }
}

/* Entry e = ((b - b0) T + t) L + l keyed by ridx(tokens[b, t], legal[b, l] % C), or R
 * (ignored) for a padded slot, an empty slot or a piece in hand. */
static __global__ void move_hidden_relative_keys_kernel(
    const int32_t *__restrict__ tokens, int64_t token_stride, const int32_t *__restrict__ legal,
    const int32_t *__restrict__ counts, int64_t b0, int64_t n, int64_t T, int64_t L, int64_t C,
    int64_t W, int64_t H, int64_t K, int64_t R, uint32_t *__restrict__ keys,
    int32_t *__restrict__ ids) {
    MK_GRID_STRIDE(e, n) {
        const int64_t bt = e / L, l = e - bt * L, b = b0 + bt / T, t = bt % T;
        const int64_t count = counts ? counts[b] : L;
        int64_t key = R;
        if (l < count) {
            const int64_t part = mk_relative_token(tokens[b * token_stride + t], C, W, H, K);
            if (part >= 0) key = part + mk_relative_class(legal[b * L + l] % C, C, W, H);
        }
        keys[e] = (uint32_t)key;
        ids[e] = (int32_t)e;
    }
}

/* A warp per 32 consecutive sorted entries: each entry that starts a run of equal keys
 * (the sort kept each run in entry order) has its run added onto dst[key, :] by the whole
 * warp, lane d adding unit d (d + 32, ...) in run order. Entry e is slot (b0 + e / per,
 * e % L), per = L (classes) or T L (relative rows). The run starts are gathered with
 * shuffles (an OR over the warp), so every lane walks the same runs. */
static __global__ void move_hidden_scatter_kernel(const uint32_t *__restrict__ sorted,
                                                  const int32_t *__restrict__ order, int64_t n,
                                                  uint32_t ignore, int64_t per, int64_t L,
                                                  int64_t b0, const float *__restrict__ grad,
                                                  const float *__restrict__ pre,
                                                  const float *__restrict__ out,
                                                  int64_t out_stride, int64_t D,
                                                  float *__restrict__ dst) {
    const int lane = threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; w * 32 < n;
         w += warps) { /* the same w in every lane of a warp */
        const int64_t j = w * 32 + lane;
        int starts = 0;
        if (j < n) {
            const uint32_t key = sorted[j];
            if (key != ignore && (j == 0 || sorted[j - 1] != key)) starts = (int)(1u << lane);
        }
        for (int off = 16; off > 0; off >>= 1) starts |= __shfl_xor_sync(0xffffffffu, starts, off);
        for (int i = 0; i < 32; i++) {
            if (!(((unsigned)starts >> i) & 1u)) continue;
            const int64_t first = w * 32 + i;
            const uint32_t key = sorted[first];
            for (int64_t d = lane; d < D; d += 32) {
                float acc = dst[(int64_t)key * D + d];
                /* MH_DEPTH entries' loads in flight before their adds: the run's entries
                 * are contiguous, so `in` is true for a prefix of each batch */
                for (int64_t k0 = first;; k0 += MH_DEPTH) {
                    bool in[MH_DEPTH];
                    float x[MH_DEPTH];
#pragma unroll
                    for (int q = 0; q < MH_DEPTH; q++) {
                        const int64_t k = k0 + q;
                        in[q] = k < n && sorted[k] == key;
                        x[q] = 0.0f;
                        if (in[q]) {
                            const int64_t e = order[k], b = b0 + e / per, bl = b * L + e % L;
                            if (pre[bl * D + d] > 0.0f)
                                x[q] = __fmul_rn(grad[bl], out[b * out_stride + d]);
                        }
                    }
#pragma unroll
                    for (int q = 0; q < MH_DEPTH; q++)
                        if (in[q]) acc = __fadd_rn(acc, x[q]);
                    if (!in[MH_DEPTH - 1]) break;
                }
                dst[(int64_t)key * D + d] = acc;
            }
        }
    }
}

/* Positions per chunk when the scratch allows: at most MH_CHUNK_ENTRIES triples. */
static int64_t chunk_positions(int64_t B, int64_t T, int64_t L) {
    const int64_t each = (T > 1 ? T : 1) * L, c = each > 0 ? MH_CHUNK_ENTRIES / each : B;
    return c < 1 ? 1 : c > B ? B : c;
}

typedef struct {
    size_t offsets, slots, words, temp, total; /* bytes of each part (rounded) and in all */
} mh_layout;

/* The scratch for chunks of `chunk` positions: grad_out's offsets [B + 1] and slots [B L]
 * (int64), then the keys, sorted keys, ids and order of a chunk's entries, then CUB's
 * scratch for sorting them on up to 32 bits. */
static mk_status layout(int64_t B, int64_t T, int64_t L, int64_t chunk, mh_layout *lay) {
    mk_status status = MK_OK;
    size_t temp = 0;
    const size_t n = (size_t)(chunk * (T > 1 ? T : 1) * L > 0 ? chunk * (T > 1 ? T : 1) * L : 1);
    memset(lay, 0, sizeof *lay);
    MK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, temp, (const uint32_t *)NULL,
                                                (uint32_t *)NULL, (const int32_t *)NULL,
                                                (int32_t *)NULL, (int)n, 0, 32));
    lay->offsets = mh_round_up((size_t)(B + 1) * sizeof(int64_t));
    lay->slots = mh_round_up((size_t)(B * L > 0 ? B * L : 1) * sizeof(int64_t));
    lay->words = mh_round_up(n * 4);
    lay->temp = mh_round_up(temp ? temp : 1);
    lay->total = lay->offsets + lay->slots + 4 * lay->words + lay->temp + MH_ALIGN - 1;
done:
    return status;
}

static mk_status check_shapes(int64_t B, int64_t T, int64_t L) {
    if (B < 0 || T < 0 || L < 0 || (L > 0 && (T > 1 ? T : 1) > INT32_MAX / L))
        return mk_fail(MK_ERR_VALUE,
                       "move_hidden_backward: B = %lld, T = %lld, L = %lld: one position's T L "
                       "(token, move) pairs must stay below 2^31 on the GPU",
                       (long long)B, (long long)T, (long long)L);
    return MK_OK;
}

extern "C" mk_status mk_move_hidden_backward_cuda_ws_bytes(int64_t B, int64_t T, int64_t L,
                                                           int64_t D, size_t *bytes) {
    mh_layout lay;
    mk_status status;
    *bytes = 0;
    if (D <= 0 || B == 0 || L == 0) return MK_OK;
    if (D > MK_MOVE_HIDDEN_MAX_D) /* refused here too: a model sizing its scratch learns it */
        return mk_fail(MK_ERR_VALUE, "move_hidden: D must be in [0, %d] on the GPU, got %lld",
                       MK_MOVE_HIDDEN_MAX_D, (long long)D);
    if ((status = check_shapes(B, T, L)) != MK_OK ||
        (status = layout(B, T, L, chunk_positions(B, T, L), &lay)) != MK_OK)
        return status;
    *bytes = lay.total;
    return MK_OK;
}

/* The most positions per chunk (at most chunk_positions) whose layout fits work_bytes, and
 * that layout; MK_ERR_VALUE when not even one position's does. Less scratch than the
 * query's only means more chunks: the same adds in the same order. */
static mk_status fit_chunk(int64_t B, int64_t T, int64_t L, size_t work_bytes, int64_t *chunk,
                           mh_layout *lay) {
    mk_status status;
    int64_t lo = 1, hi = chunk_positions(B, T, L);
    if ((status = layout(B, T, L, hi, lay)) != MK_OK) return status;
    if (lay->total > work_bytes) {
        if ((status = layout(B, T, L, 1, lay)) != MK_OK) return status;
        if (lay->total > work_bytes)
            return mk_fail(MK_ERR_VALUE,
                           "move_hidden_backward: the scratch given holds %zu bytes; B = %lld, T "
                           "= %lld, L = %lld need %zu (one position at a time) or more",
                           work_bytes, (long long)B, (long long)T, (long long)L, lay->total);
        while (lo < hi - 1) { /* layout(lo) fits, layout(hi) does not */
            const int64_t mid = lo + (hi - lo) / 2;
            if ((status = layout(B, T, L, mid, lay)) != MK_OK) return status;
            if (lay->total <= work_bytes) lo = mid;
            else hi = mid;
        }
        hi = lo;
        if ((status = layout(B, T, L, hi, lay)) != MK_OK) return status;
    }
    *chunk = hi;
    return MK_OK;
}

/* Sorts entries [0, n) of keys/ids (keys below 2^bits) and adds each run onto dst. */
static mk_status sort_and_scatter(uint32_t *keys, uint32_t *sorted, int32_t *ids, int32_t *order,
                                  void *temp, size_t temp_bytes, int64_t n, int64_t num_keys,
                                  int64_t per, int64_t L, int64_t b0, const float *grad,
                                  const float *pre, const float *out, int64_t out_stride,
                                  int64_t D, float *dst, cudaStream_t s) {
    mk_status status = MK_OK;
    size_t need = 0;
    const int bits = key_bits(num_keys);
    MK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, need, keys, sorted, ids, order, (int)n, 0,
                                                bits, s));
    if (need > temp_bytes) { /* sized for 32 bits and the largest chunk: never expected */
        status = mk_fail(MK_ERR_RUNTIME,
                         "move_hidden_backward: the sort asks for %zu bytes of scratch, %zu "
                         "were set aside",
                         need, temp_bytes);
        goto done;
    }
    MK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted, ids, order,
                                                (int)n, 0, bits, s));
    move_hidden_scatter_kernel<<<mk_blocks_for(n, 256), 256, 0, s>>>(
            sorted, order, n, (uint32_t)num_keys, per, L, b0, grad, pre, out, out_stride, D, dst);
    MK_CUDA_LAUNCHED("move_hidden_scatter_kernel");
done:
    return status;
}

extern "C" mk_status mk_move_hidden_backward_cuda_ws(
    const float *grad, const float *pre, const float *out, int64_t out_stride, const int32_t *tokens,
    int64_t token_stride, const int32_t *legal, const int32_t *counts, int64_t B, int64_t T,
    int64_t L, int64_t C, int64_t W, int64_t H, int64_t K, int64_t D, float *grad_relative,
    float *grad_class, float *grad_out, void *work, size_t work_bytes, void *stream) {
    mk_status status = MK_OK;
    cudaStream_t s = MK_STREAM(stream);
    mh_layout lay;
    char *at;
    int64_t *offsets, *slots;
    uint32_t *keys, *sorted;
    int32_t *ids, *order;
    int64_t R, chunk = 1, tile;
    size_t out_smem;
    if (D == 0) return MK_OK;
    if (D < 0 || D > MK_MOVE_HIDDEN_MAX_D || C < 1 || W < 1 || H < 1 || K < 0 ||
        C % (W * H) != 0 || C > INT32_MAX)
        return mk_fail(MK_ERR_VALUE,
                       "move_hidden_backward: needs 0 <= D <= %d on the GPU and C a positive "
                       "multiple of W H below 2^31, got D = %lld, C = %lld, W = %lld, H = %lld",
                       MK_MOVE_HIDDEN_MAX_D, (long long)D, (long long)C, (long long)W,
                       (long long)H);
    R = K * (2 * W - 1) * (2 * H - 1) * (C / (W * H));
    if (R >= INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "move_hidden_backward: %lld relative rows pass 2^31",
                       (long long)R);
    if (B == 0 || L == 0) { /* no slot adds anything: every gradient is 0 */
        MK_CUDA_TRY(cudaMemsetAsync(grad_relative, 0, (size_t)(R * D) * sizeof(float), s));
        MK_CUDA_TRY(cudaMemsetAsync(grad_class, 0, (size_t)(C * D) * sizeof(float), s));
        MK_CUDA_TRY(cudaMemsetAsync(grad_out, 0, (size_t)(out_stride ? B * D : D) * sizeof(float), s));
        return MK_OK;
    }
    /* the scratch is checked before anything is launched: too small writes nothing */
    if ((status = check_shapes(B, T, L)) != MK_OK ||
        (status = fit_chunk(B, T, L, work ? work_bytes : 0, &chunk, &lay)) != MK_OK)
        return status;
    at = (char *)(((uintptr_t)work + MH_ALIGN - 1) / MH_ALIGN * MH_ALIGN);
    offsets = (int64_t *)at;
    slots = (int64_t *)(at += lay.offsets);
    keys = (uint32_t *)(at += lay.slots);
    sorted = (uint32_t *)(at += lay.words);
    ids = (int32_t *)(at += lay.words);
    order = (int32_t *)(at += lay.words);
    at += lay.words;
    MK_CUDA_TRY(cudaMemsetAsync(grad_relative, 0, (size_t)(R * D) * sizeof(float), s));
    MK_CUDA_TRY(cudaMemsetAsync(grad_class, 0, (size_t)(C * D) * sizeof(float), s));

    move_hidden_offsets_kernel<<<1, MH_OUT_THREADS, 0, s>>>(counts, B, L, offsets);
    MK_CUDA_LAUNCHED("move_hidden_offsets_kernel");
    move_hidden_slots_kernel<<<mk_blocks_for(B * L, 256), 256, 0, s>>>(counts, offsets, B, L,
                                                                        slots);
    MK_CUDA_LAUNCHED("move_hidden_slots_kernel");
    if (out_stride) {
        move_hidden_out_rows_kernel<<<mk_blocks_for(B * D, 256), 256, 0, s>>>(grad, pre, counts, B,
                                                                             L, D, grad_out);
        MK_CUDA_LAUNCHED("move_hidden_out_rows_kernel");
    } else {
        tile = MH_OUT_SMEM / 2 / (D * (int64_t)sizeof(float)); /* >= 1: D <= MK_MOVE_HIDDEN_MAX_D */
        out_smem = (2 * (size_t)(tile * D) + (size_t)D) * sizeof(float); /* <= 48 KB */
        move_hidden_out_kernel<<<1, MH_OUT_THREADS, out_smem, s>>>(grad, pre, offsets, slots, B,
                                                                   D, tile, grad_out);
        MK_CUDA_LAUNCHED("move_hidden_out_kernel");
    }

    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
        const int64_t nb = B - b0 < chunk ? B - b0 : chunk, n_class = nb * L, n_rel = nb * T * L;
        move_hidden_class_keys_kernel<<<mk_blocks_for(n_class, 256), 256, 0, s>>>(
                legal, counts, b0, n_class, L, C, keys, ids);
        MK_CUDA_LAUNCHED("move_hidden_class_keys_kernel");
        if ((status = sort_and_scatter(keys, sorted, ids, order, at, lay.temp, n_class, C, L, L,
                                       b0, grad, pre, out, out_stride, D, grad_class, s)) != MK_OK)
            goto done;
        if (n_rel == 0 || R == 0) continue;
        move_hidden_relative_keys_kernel<<<mk_blocks_for(n_rel, 256), 256, 0, s>>>(
                tokens, token_stride, legal, counts, b0, n_rel, T, L, C, W, H, K, R, keys, ids);
        MK_CUDA_LAUNCHED("move_hidden_relative_keys_kernel");
        if ((status = sort_and_scatter(keys, sorted, ids, order, at, lay.temp, n_rel, R, T * L, L,
                                       b0, grad, pre, out, out_stride, D, grad_relative, s)) != MK_OK)
            goto done;
    }
done:
    return status;
}

/* The table's entry: on the caller's scratch, or (work = NULL, work_bytes = 0: the public
 * op, which has no arena) on scratch from the workspace pool. */
extern "C" mk_status mk_move_hidden_backward_cuda(
    void *stream, const float *grad, const float *pre, const float *out, int64_t out_stride,
    const int32_t *tokens,
    int64_t token_stride, const int32_t *legal, const int32_t *counts, int64_t B, int64_t T,
    int64_t L, int64_t C, int64_t W, int64_t H, int64_t K, int64_t D, float *grad_relative,
    float *grad_class, float *grad_out, void *work, size_t work_bytes) {
    if (work || work_bytes)
        return mk_move_hidden_backward_cuda_ws(grad, pre, out, out_stride, tokens, token_stride, legal, counts,
                                               B, T, L, C, W, H, K, D, grad_relative, grad_class,
                                               grad_out, work, work_bytes, stream);
    size_t bytes = 0;
    mk_status status = mk_move_hidden_backward_cuda_ws_bytes(B, T, L, D, &bytes);
    if (status == MK_OK) status = mk_work_alloc(&work, bytes, MK_STREAM(stream));
    if (status != MK_OK) return status;
    status = mk_move_hidden_backward_cuda_ws(grad, pre, out, out_stride, tokens, token_stride, legal, counts,
                                             B, T, L, C, W, H, K, D, grad_relative, grad_class,
                                             grad_out, work, bytes, stream);
    return mk_work_free(work, status, MK_STREAM(stream));
}
