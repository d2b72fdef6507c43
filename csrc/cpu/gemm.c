/* GEMM on the CPU through OpenBLAS, as shipped by the scipy-openblas32 wheel (symbols
 * prefixed scipy_, 32-bit integers). manaka/__init__.py loads that library globally
 * before _core, so the extension resolves these symbols without an rpath. */
#include <limits.h>

#include <cblas.h>

#include "backend_cpu.h"

mk_status mk_gemm_cpu(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc) {
    (void)stream;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return mk_fail(MK_ERR_VALUE, "gemm: dimension above the 32-bit BLAS limit (%lld x %lld x %lld)",
                       (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return MK_OK;
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                      trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                      (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return MK_OK;
}

void mk_gemm_set_num_threads(int n) { scipy_openblas_set_num_threads(n); }
