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

#include <cblas.h>

#include "backend_cpu.h"
#include "core/gemm_check.h"
#include "threads.h"

/* Below this many multiply-adds per tile a tile is not split further: a call costs
 * microseconds, and each tile packs its own slices of A and B. */
#define MK_GEMM_TILE_MIN_WORK (1 << 19)
/* No tile side is split below this many rows or columns, nor into more tiles than this.
 * Each tile is a separate OpenBLAS call that packs its own slices of A and B and runs at a
 * smaller shape than the whole GEMM: with sides of 128 and up to 32 tiles, the seed step's
 * GEMMs took +27 % time at 1 thread (bench/results/gemm-tiles-ab.md). Sides of 512 and at
 * most 2 tiles run at one call's speed at 1 thread and still give 2 threads a tile each
 * at the seed shapes (bench/results/cpu-kernels.md). More threads take their parallelism
 * from independent whole GEMMs (gemm_batch: a layer's dW and dx share one tile list), not
 * from smaller tiles. The team never
 * exceeds the tile count, so concurrent single-threaded calls stay within OpenBLAS's fixed
 * number of work buffers. */
#define MK_GEMM_TILE_MIN_SIDE 512
#define MK_GEMM_MAX_TILES 2

/* A leading dimension of 0 (an empty operand) is passed to OpenBLAS as 1, which it
 * requires and never reads. */
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

/* One tile of one call: C[i0:i1, j0:j1] = op(A)[i0:i1, :] @ op(B)[:, j0:j1]. */
typedef struct {
    const mk_gemm_call *call;
    int64_t i0, i1, j0, j1;
} gemm_tile;

static int64_t tile_work(const gemm_tile *t) {
    return (t->i1 - t->i0) * (t->j1 - t->j0) * t->call->K;
}

static void run_tile(const gemm_tile *t) {
    const mk_gemm_call *c = t->call;
    sgemm(c->trans_a, c->trans_b, t->i1 - t->i0, t->j1 - t->j0, c->K, c->alpha,
          c->A + (c->trans_a ? t->i0 : t->i0 * c->lda), c->lda,
          c->B + (c->trans_b ? t->j0 * c->ldb : t->j0), c->ldb, c->beta,
          c->C + t->i0 * c->ldc + t->j0, c->ldc);
}

/* Every call's fixed tiles (tile_grid: a function of its shape alone) in one list, the
 * largest first, taken by the team one at a time. Each tile is the same single-threaded
 * sgemm whichever thread runs it and whatever else is in the list, so C has the bits of
 * the calls made one by one, for any thread count. */
static void run_calls(const mk_gemm_call *calls, int count) {
    gemm_tile tiles[MK_GEMM_BATCH_MAX * MK_GEMM_MAX_TILES];
    int64_t n = 0;
    for (int k = 0; k < count; k++) {
        const mk_gemm_call *c = &calls[k];
        if (c->M == 0 || c->N == 0) continue;
        int64_t rows, cols;
        tile_grid(c->M, c->N, c->K, &rows, &cols);
        for (int64_t t = 0; t < rows * cols; t++) {
            gemm_tile g = {c, boundary(c->M, t / cols, rows), boundary(c->M, t / cols + 1, rows),
                           boundary(c->N, t % cols, cols), boundary(c->N, t % cols + 1, cols)};
            int64_t at = n++; /* insertion by falling work, ties in call order */
            while (at > 0 && tile_work(&tiles[at - 1]) < tile_work(&g)) {
                tiles[at] = tiles[at - 1];
                at--;
            }
            tiles[at] = g;
        }
    }
    int threads = mk_get_num_threads();
    if (threads > n) threads = (int)n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int64_t t = 0; t < n; t++) run_tile(&tiles[t]);
}

mk_status mk_gemm_cpu(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc) {
    (void)stream;
    const mk_gemm_call call = {.trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N, .K = K,
                              .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C,
                              .lda = lda, .ldb = ldb, .ldc = ldc};
    MK_TRY(mk_gemm_call_check(&call, "gemm"));
    run_calls(&call, 1);
    return MK_OK;
}

mk_status mk_gemm_batch_cpu(void *stream, const mk_gemm_call *calls, int count) {
    (void)stream;
    MK_TRY(mk_gemm_batch_check(calls, count));
    run_calls(calls, count);
    return MK_OK;
}

void mk_gemm_pin_blas_threads(void) { scipy_openblas_set_num_threads(1); }
