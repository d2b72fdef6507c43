/* manaka: the C core's one header for status, errors, the pair index and the thread count.
 *
 * The ops themselves (the three fused ops and the training step's primitives) are entries
 * of the backend table, each declared once with its math in core/backend_ops.def.
 * Nothing here includes Python.h. The core never aborts: a function returns an mk_status,
 * and on failure leaves a message in mk_error() (thread-local) that the binding turns into
 * a Python exception.
 *
 * Conventions: float32 data, int32 indices, row-major C-contiguous buffers.
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

/* ---------------------------------------------------------------- threads
 * OpenMP thread count used by every CPU op (default: OpenMP's default). n = 0 restores the
 * default; n is at most MK_MAX_THREADS (an MK_ERR_VALUE otherwise, the count unchanged): far
 * beyond any machine's cores, a team of 100,000 threads crashed the next op when the
 * system could not start them. */
#define MK_MAX_THREADS 4096
mk_status mk_set_num_threads(int64_t n);
int mk_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* MANAKA_H */
