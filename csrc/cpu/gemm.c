/* GEMM on the CPU through OpenBLAS, as shipped by the scipy-openblas32 wheel (symbols
 * prefixed scipy_, 32-bit integers). manaka/__init__.py loads that library globally
 * before _core, so the extension resolves these symbols without an rpath.
 *
 * Threads: OpenBLAS's own pool is pinned to one thread and manaka's OpenMP team splits each
 * GEMM into row (or column) blocks, one single-threaded sgemm per thread. With both pools
 * active, OpenBLAS's threads kept spinning after each GEMM while the OpenMP loops that
 * follow wanted the same cores (30% of a step at the seed shapes on 2 cores went to the
 * two pools' spin-waits). One pool, sized by mk_set_num_threads, fixes that. */
#include <limits.h>

#include <cblas.h>

#include "backend_cpu.h"
#include "threads.h"

/* Below this many multiply-adds a GEMM runs on one thread: splitting costs more. */
#define MK_GEMM_SPLIT_MIN (1 << 20)
/* Concurrent single-threaded calls each hold one of OpenBLAS's work buffers, of which it
 * keeps a fixed number (twice its compiled CPU limit, 64 or more): stay well inside it. */
#define MK_GEMM_MAX_THREADS 64

static void sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                      trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                      (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

mk_status mk_gemm_cpu(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc) {
    (void)stream;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return mk_fail(MK_ERR_VALUE, "gemm: dimension above the 32-bit BLAS limit (%lld x %lld x %lld)",
                       (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return MK_OK;
    int threads = mk_get_num_threads() < MK_GEMM_MAX_THREADS ? mk_get_num_threads() : MK_GEMM_MAX_THREADS;
    if (threads <= 1 || M * N * K < MK_GEMM_SPLIT_MIN) {
        sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return MK_OK;
    }
    int split_rows = M >= N; /* split the longer side of C, in blocks of 16 */
    int64_t n = split_rows ? M : N;
#pragma omp parallel num_threads(threads)
    {
        int64_t t = mk_thread_id(), nt = mk_team_size();
        int64_t lo = n * t / nt / 16 * 16, hi = t == nt - 1 ? n : n * (t + 1) / nt / 16 * 16;
        if (hi > lo) {
            if (split_rows) /* C[lo:hi, :] = op(A)[lo:hi, :] @ op(B) */
                sgemm(trans_a, trans_b, hi - lo, N, K, alpha, A + (trans_a ? lo : lo * lda), lda,
                      B, ldb, beta, C + lo * ldc, ldc);
            else /* C[:, lo:hi] = op(A) @ op(B)[:, lo:hi] */
                sgemm(trans_a, trans_b, M, hi - lo, K, alpha, A, lda,
                      B + (trans_b ? lo * ldb : lo), ldb, beta, C + lo, ldc);
        }
    }
    return MK_OK;
}

void mk_gemm_pin_blas_threads(void) { scipy_openblas_set_num_threads(1); }
