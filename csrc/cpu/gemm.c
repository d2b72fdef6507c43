/* GEMM on the CPU through OpenBLAS, as shipped by the scipy-openblas32 wheel (symbols
 * prefixed scipy_, 32-bit integers). manaka/__init__.py loads that library globally
 * before _core, so the extension resolves these symbols without an rpath.
 *
 * Threads: OpenBLAS's own pool is pinned to one thread and manaka's OpenMP team runs the
 * GEMM as tiles of C, one single-threaded sgemm per tile. With both pools active,
 * OpenBLAS's threads kept spinning after each GEMM while the OpenMP loops that follow
 * wanted the same cores (30% of a step at the seed shapes on 2 cores went to the two
 * pools' spin-waits). One pool, sized by mk_set_num_threads, fixes that.
 *
 * Reproducibility: the tiles are a function of (M, N, K) only, never of the thread count;
 * threads merely take tiles. OpenBLAS picks its kernel (and so the order of the K sum)
 * by CPU and by the shape of each call, so splitting C by thread count changed the bits
 * of C with the team size on some CPUs. With fixed tiles each element of C
 * comes from the same call on the same shape whatever the team size: same bits for any
 * thread count on one machine with one OpenBLAS build. */
#include <limits.h>

#include <cblas.h>

#include "backend_cpu.h"
#include "threads.h"

/* Below this many multiply-adds per tile a tile is not split further: a call costs
 * microseconds, and each tile packs its own slices of A and B. */
#define MK_GEMM_TILE_MIN_WORK (1 << 19)
/* No tile side is split below this many rows or columns, nor into more tiles than this.
 * Each tile is a separate OpenBLAS call that packs its own slices of A and B and runs at a
 * smaller shape than the whole GEMM: with sides of 128 and up to 32 tiles, the seed step's
 * GEMMs took +27 % time at 1 thread (bench/results/gemm-tiles-ab.md). Sides of 512 and at
 * most 2 tiles run at one call's speed at 1 thread and still give 2 threads a tile each
 * at the seed shapes (bench/results/cpu-kernels.md). More cores would take their
 * parallelism from independent whole GEMMs, not from smaller tiles. The team never
 * exceeds the tile count, so concurrent single-threaded calls stay within OpenBLAS's fixed
 * number of work buffers. */
#define MK_GEMM_TILE_MIN_SIDE 512
#define MK_GEMM_MAX_TILES 2

static void sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                      trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                      lda > 0 ? (int)lda : 1, B, ldb > 0 ? (int)ldb : 1, beta, C,
                      ldc > 0 ? (int)ldc : 1);
}

/* The tile grid: C is cut into *rows x *cols tiles by halving the longer tile side while
 * tiles stay large enough. Depends on the shape only. */
static void tile_grid(int64_t M, int64_t N, int64_t K, int64_t *rows, int64_t *cols) {
    int64_t r = 1, c = 1;
    for (;;) {
        int64_t tm = M / r, tn = N / c;
        int split_rows = tm >= tn;
        if (r * c * 2 > MK_GEMM_MAX_TILES || (split_rows ? tm : tn) / 2 < MK_GEMM_TILE_MIN_SIDE ||
            tm * tn * K / 2 < MK_GEMM_TILE_MIN_WORK)
            break;
        if (split_rows) r *= 2;
        else c *= 2;
    }
    *rows = r;
    *cols = c;
}

/* The i-th of `parts` boundaries of [0, n): multiples of 16 (OpenBLAS's kernels work in
 * blocks of 4 to 16 rows), the last one n. Parts are never empty: n / parts >= 512. */
static int64_t boundary(int64_t n, int64_t i, int64_t parts) {
    return i >= parts ? n : n * i / parts / 16 * 16;
}

/* op(X) is rows x cols of X when not transposed, else its transpose: the element
 * (r, c) of op(X) sits at X + r * ld + c, or X + c * ld + r. A leading dimension of 0 (an
 * empty operand) is passed to OpenBLAS as 1, which it requires and never reads. */
static int leading_dim_ok(int trans, int64_t rows, int64_t cols, int64_t ld) {
    return ld >= (trans ? rows : cols);
}

mk_status mk_gemm_cpu(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc) {
    (void)stream;
    if (M < 0 || N < 0 || K < 0)
        return mk_fail(MK_ERR_VALUE, "gemm: negative dimension (M = %lld, N = %lld, K = %lld)",
                       (long long)M, (long long)N, (long long)K);
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return mk_fail(MK_ERR_VALUE, "gemm: dimension above the 32-bit BLAS limit (%lld x %lld x %lld)",
                       (long long)M, (long long)N, (long long)K);
    if (!leading_dim_ok(trans_a, M, K, lda) || !leading_dim_ok(trans_b, K, N, ldb) ||
        !leading_dim_ok(0, M, N, ldc))
        return mk_fail(MK_ERR_VALUE, "gemm: a leading dimension is below its row length "
                       "(lda = %lld, ldb = %lld, ldc = %lld for M = %lld, N = %lld, K = %lld)",
                       (long long)lda, (long long)ldb, (long long)ldc, (long long)M,
                       (long long)N, (long long)K);
    if (M == 0 || N == 0) return MK_OK;
    int64_t rows, cols;
    tile_grid(M, N, K, &rows, &cols);
    const int64_t tiles = rows * cols;
    int threads = mk_get_num_threads();
    if (threads > tiles) threads = (int)tiles;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int64_t t = 0; t < tiles; t++) {
        const int64_t i0 = boundary(M, t / cols, rows), i1 = boundary(M, t / cols + 1, rows);
        const int64_t j0 = boundary(N, t % cols, cols), j1 = boundary(N, t % cols + 1, cols);
        /* C[i0:i1, j0:j1] = op(A)[i0:i1, :] @ op(B)[:, j0:j1] */
        sgemm(trans_a, trans_b, i1 - i0, j1 - j0, K, alpha, A + (trans_a ? i0 : i0 * lda), lda,
              B + (trans_b ? j0 * ldb : j0), ldb, beta, C + i0 * ldc + j0, ldc);
    }
    return MK_OK;
}

void mk_gemm_pin_blas_threads(void) { scipy_openblas_set_num_threads(1); }
