/* The checks every backend's gemm and gemm_batch make before running anything (so a bad
 * call of a batch fails it with nothing written): dimensions that are not negative, that
 * fit the 32-bit BLAS interfaces (OpenBLAS's, cuBLAS's), and leading dimensions at least
 * the row length of the operand as stored. Header-only, for C and CUDA alike. */
#ifndef MANAKA_GEMM_CHECK_H
#define MANAKA_GEMM_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "core/backend.h"

/* op(X) is rows x cols of X when not transposed, else its transpose: the element (r, c)
 * of op(X) sits at X + r * ld + c, or X + c * ld + r. */
static inline int mk_gemm_leading_dim_ok(int trans, int64_t rows, int64_t cols, int64_t ld) {
    return ld >= (trans ? rows : cols);
}

/* 1 if `c` passes every check below (no message made: the step's hot path asks this). */
static inline int mk_gemm_call_ok(const mk_gemm_call *c) {
    const int64_t lim = INT32_MAX;
    return c->M >= 0 && c->N >= 0 && c->K >= 0 && c->M <= lim && c->N <= lim && c->K <= lim &&
           c->lda <= lim && c->ldb <= lim && c->ldc <= lim &&
           mk_gemm_leading_dim_ok(c->trans_a, c->M, c->K, c->lda) &&
           mk_gemm_leading_dim_ok(c->trans_b, c->K, c->N, c->ldb) &&
           mk_gemm_leading_dim_ok(0, c->M, c->N, c->ldc);
}

/* MK_OK, or MK_ERR_VALUE with a message that starts with `what`. */
static inline mk_status mk_gemm_call_check(const mk_gemm_call *c, const char *what) {
    const int64_t M = c->M, N = c->N, K = c->K, lim = INT32_MAX;
    if (M < 0 || N < 0 || K < 0)
        return mk_fail(MK_ERR_VALUE, "%s: negative dimension (M = %lld, N = %lld, K = %lld)",
                       what, (long long)M, (long long)N, (long long)K);
    if (M > lim || N > lim || K > lim || c->lda > lim || c->ldb > lim || c->ldc > lim)
        return mk_fail(MK_ERR_VALUE, "%s: dimension above the 32-bit BLAS limit (%lld x %lld x %lld)",
                       what, (long long)M, (long long)N, (long long)K);
    if (!mk_gemm_leading_dim_ok(c->trans_a, M, K, c->lda) ||
        !mk_gemm_leading_dim_ok(c->trans_b, K, N, c->ldb) || !mk_gemm_leading_dim_ok(0, M, N, c->ldc))
        return mk_fail(MK_ERR_VALUE, "%s: a leading dimension is below its row length "
                       "(lda = %lld, ldb = %lld, ldc = %lld for M = %lld, N = %lld, K = %lld)",
                       what, (long long)c->lda, (long long)c->ldb, (long long)c->ldc, (long long)M,
                       (long long)N, (long long)K);
    return MK_OK;
}

/* Every call of a gemm_batch, and the count (0 to MK_GEMM_BATCH_MAX). */
static inline mk_status mk_gemm_batch_check(const mk_gemm_call *calls, int count) {
    if (count < 0 || count > MK_GEMM_BATCH_MAX)
        return mk_fail(MK_ERR_VALUE, "gemm_batch: count = %d, expected 0 to %d", count,
                       MK_GEMM_BATCH_MAX);
    if (count > 0 && !calls) return mk_fail(MK_ERR_VALUE, "gemm_batch: calls is NULL");
    for (int k = 0; k < count; k++) {
        if (mk_gemm_call_ok(&calls[k])) continue;
        char what[32];
        snprintf(what, sizeof what, "gemm_batch call %d", k);
        return mk_gemm_call_check(&calls[k], what);
    }
    return MK_OK;
}

#endif
