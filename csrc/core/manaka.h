/* manaka: the C core's one header for status, errors and the three fused ops.
 *
 * Every op is declared here exactly once, with its math (docs/design.md §1) as the comment.
 * Backends (cpu/, cuda/) implement these signatures; nothing here includes Python.h.
 * The core never aborts: a function returns an mk_status, and on failure leaves a
 * message in mk_error() (thread-local) that the binding turns into a Python exception.
 *
 * Conventions: float32 data, int32 indices, row-major C-contiguous buffers.
 * Inputs are validated by the caller (the binding checks ranges before any work);
 * these functions trust their arguments.
 *
 * CUDA variants (csrc/cuda/, built only with the CUDA backend): the same signature with
 * device pointers plus a trailing `void *stream` (a cudaStream_t; NULL = the legacy
 * default stream). They only enqueue work on that stream (no host synchronisation), and
 * report CUDA failures as MK_ERR_RUNTIME with file:line and the CUDA error string.
 */
#ifndef MANAKA_H
#define MANAKA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MK_OK = 0,
    MK_ERR_VALUE = 1,   /* bad argument value (binding raises ValueError) */
    MK_ERR_TYPE = 2,    /* bad argument type (TypeError) */
    MK_ERR_NOMEM = 3,   /* allocation failed (MemoryError) */
    MK_ERR_RUNTIME = 4, /* backend failure, e.g. a CUDA error (RuntimeError) */
    MK_ERR_FLOAT = 5,   /* a non-finite loss (FloatingPointError) */
} mk_status;

/* Records a printf-style message for the calling thread and returns `status`. */
mk_status mk_fail(mk_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The calling thread's last error message ("" if none). */
const char *mk_error(void);

/* Returns the status of `call` from the enclosing function unless it is MK_OK. */
#define MK_TRY(call)                              \
    do {                                          \
        mk_status mk_try_ = (call);               \
        if (mk_try_ != MK_OK) return mk_try_;     \
    } while (0)

/* pair_index(a, b) = hi * (hi + 1) / 2 + lo with lo = min(a, b), hi = max(a, b). */
static inline int64_t mk_pair_index(int64_t a, int64_t b) {
    int64_t lo = a < b ? a : b, hi = a < b ? b : a;
    return hi * (hi + 1) / 2 + lo;
}
/* Number of rows of a pair table over a vocabulary of V tokens: V (V + 1) / 2. */
static inline int64_t mk_num_pairs(int64_t V) { return V * (V + 1) / 2; }
/* The largest vocabulary any pair table can have: tokens are int32, so V - 1 <= INT32_MAX.
 * It also keeps mk_num_pairs(V) <= 2^61 + 2^30, far from int64 overflow. */
#define MK_MAX_PAIR_VOCAB ((int64_t)1 << 31)
/* The V with V (V + 1) / 2 = num_pairs, or -1 if there is none (also when num_pairs is
 * above mk_num_pairs(MK_MAX_PAIR_VOCAB)). A bisection over [0, MK_MAX_PAIR_VOCAB]: at most
 * 32 steps whatever num_pairs is. (A doubling search for the bracket
 * overflowed V (V + 1) for num_pairs near 2^62 and never ended, with the GIL held.) */
static inline int64_t mk_vocab_of_pairs(int64_t num_pairs) {
    if (num_pairs < 0 || num_pairs > mk_num_pairs(MK_MAX_PAIR_VOCAB)) return -1;
    int64_t lo = 0, hi = MK_MAX_PAIR_VOCAB;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (mk_num_pairs(mid) < num_pairs) lo = mid + 1;
        else hi = mid;
    }
    return mk_num_pairs(lo) == num_pairs ? lo : -1;
}

/* ---------------------------------------------------------------- GatherDot
 * logits[b, l] = sum_h hidden[b, h] * table[indices[b, l], h]   for l < counts[b]
 * logits[b, l] = 0                                               for l >= counts[b]
 * hidden [B, W], table [M, W], indices [B, L], counts [B] (NULL means every row has L).
 * Indices at padded slots (l >= counts[b]) are never read.
 */
mk_status mk_gather_dot_cpu(const float *hidden, const float *table, const int32_t *indices,
                            const int32_t *counts, int64_t B, int64_t L, int64_t W,
                            float *logits);
mk_status mk_gather_dot_cuda(const float *hidden, const float *table, const int32_t *indices,
                             const int32_t *counts, int64_t B, int64_t L, int64_t W,
                             float *logits, void *stream);

/* For upstream grad G [B, L] (padded slots ignored):
 * grad_hidden[b, :] = sum_{l < counts[b]} G[b, l] * table[indices[b, l], :]
 * grad_table[m, :]  = sum_{(b, l): indices[b, l] = m, l < counts[b]} G[b, l] * hidden[b, :]
 * Both outputs are overwritten. Either may be NULL to skip it.
 * grad_table is bitwise deterministic, whatever the thread count.
 */
mk_status mk_gather_dot_backward_cpu(const float *grad, const float *hidden, const float *table,
                                     const int32_t *indices, const int32_t *counts, int64_t B,
                                     int64_t L, int64_t W, int64_t M, float *grad_hidden,
                                     float *grad_table);
/* CUDA: grad_table is bitwise reproducible run to run (entries grouped by move id with a
 * stable sort, each row summed in ascending (b, l)); grad_hidden too (one thread per
 * column, ascending l). (An atomicAdd variant, for the benchmark only, is declared in
 * cuda/bench_variants.h.) */
mk_status mk_gather_dot_backward_cuda(const float *grad, const float *hidden, const float *table,
                                      const int32_t *indices, const int32_t *counts, int64_t B,
                                      int64_t L, int64_t W, int64_t M, float *grad_hidden,
                                      float *grad_table, void *stream);
/* The same with caller scratch instead of the workspace pool: the training step's path
 * (model.c hands every op one region of its arena, so a step allocates nothing).
 * `work` is device memory of at least mk_gather_dot_backward_cuda_ws_bytes(B, L, M) bytes,
 * any alignment; with fewer the call fails with MK_ERR_VALUE before writing anything. Its
 * contents are undefined afterwards. Likewise for the _ws launchers below. The one above
 * is this one between a pool allocation and its release. */
mk_status mk_gather_dot_backward_cuda_ws_bytes(int64_t B, int64_t L, int64_t M, size_t *bytes);
mk_status mk_gather_dot_backward_cuda_ws(const float *grad, const float *hidden,
                                         const float *table, const int32_t *indices,
                                         const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                         int64_t M, float *grad_hidden, float *grad_table,
                                         void *work, size_t work_bytes, void *stream);

/* ---------------------------------------------------------------- PowerSums
 * out[b, s, k, :] = sum_{t : tokens[b, s, t] >= 0} emb[tokens[b, s, t], :] ** (k + 1)
 * emb [V, D], tokens [B, S, T] (-1 = empty slot), out [B, S, K, D], k = 0..K-1.
 * `rows` = B * S (the op does not care which axis is which).
 */
mk_status mk_power_sums_cpu(const float *emb, const int32_t *tokens, int64_t rows, int64_t T,
                            int64_t D, int64_t K, float *out);
mk_status mk_power_sums_cuda(const float *emb, const int32_t *tokens, int64_t rows, int64_t T,
                             int64_t D, int64_t K, float *out, void *stream);

/* grad_emb[v, :] = sum over occurrences of v of sum_k G[row, k, :] * (k + 1) * emb[v, :] ** k
 * grad [rows, K, D]; grad_emb [V, D] is overwritten; bitwise deterministic.
 */
mk_status mk_power_sums_backward_cpu(const float *grad, const float *emb, const int32_t *tokens,
                                     int64_t rows, int64_t T, int64_t D, int64_t K, int64_t V,
                                     float *grad_emb);
/* CUDA: bitwise reproducible (occurrences grouped by token with a stable sort). */
mk_status mk_power_sums_backward_cuda(const float *grad, const float *emb, const int32_t *tokens,
                                      int64_t rows, int64_t T, int64_t D, int64_t K, int64_t V,
                                      float *grad_emb, void *stream);
mk_status mk_power_sums_backward_cuda_ws_bytes(int64_t rows, int64_t T, int64_t V, size_t *bytes);
mk_status mk_power_sums_backward_cuda_ws(const float *grad, const float *emb,
                                         const int32_t *tokens, int64_t rows, int64_t T,
                                         int64_t D, int64_t K, int64_t V, float *grad_emb,
                                         void *work, size_t work_bytes, void *stream);

/* ---------------------------------------------------------------- PairSums
 * out[row, :] = sum_{i < j, tok_i >= 0, tok_j >= 0} pair_table[pair_index(tok_i, tok_j), :]
 * pair_table [num_pairs, P], tokens [rows, T], out [rows, P].
 */
mk_status mk_pair_sums_cpu(const float *pair_table, const int32_t *tokens, int64_t rows,
                           int64_t T, int64_t P, float *out);
mk_status mk_pair_sums_cuda(const float *pair_table, const int32_t *tokens, int64_t rows,
                            int64_t T, int64_t P, float *out, void *stream);

/* grad_pair_table[pair_index(tok_i, tok_j), :] += grad[row, :] for every such pair;
 * grad [rows, P]; grad_pair_table [num_pairs, P] is overwritten; bitwise deterministic.
 */
mk_status mk_pair_sums_backward_cpu(const float *grad, const int32_t *tokens, int64_t rows,
                                    int64_t T, int64_t P, int64_t num_pairs,
                                    float *grad_pair_table);
/* CUDA: bitwise reproducible (pairs grouped by table row with a stable sort; every element
 * of the dense table written once). (An atomicAdd variant, for the benchmark only, is
 * declared in cuda/bench_variants.h.) */
mk_status mk_pair_sums_backward_cuda(const float *grad, const int32_t *tokens, int64_t rows,
                                     int64_t T, int64_t P, int64_t num_pairs,
                                     float *grad_pair_table, void *stream);
mk_status mk_pair_sums_backward_cuda_ws_bytes(int64_t rows, int64_t T, int64_t num_pairs,
                                              size_t *bytes);
mk_status mk_pair_sums_backward_cuda_ws(const float *grad, const int32_t *tokens, int64_t rows,
                                        int64_t T, int64_t P, int64_t num_pairs,
                                        float *grad_pair_table, void *work, size_t work_bytes,
                                        void *stream);

/* ---------------------------------------------------------------- threads
 * OpenMP thread count used by every CPU op (default: OpenMP's default). */
void mk_set_num_threads(int n);
int mk_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* MANAKA_H */
