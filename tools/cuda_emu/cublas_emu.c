/* A stand-in for the five cuBLAS entry points manaka loads (csrc/cuda/cublas_dynamic.c),
 * for the emulated build: column-major SGEMM as plain loops over host memory ("device"
 * memory is host memory there). Accumulates in double so it is a reference, not a rival. */
#include <stdlib.h>

typedef struct handle { int math_mode; } handle;

int cublasCreate_v2(handle **h) {
    *h = calloc(1, sizeof **h);
    return *h ? 0 : 3; /* CUBLAS_STATUS_ALLOC_FAILED */
}
int cublasSetStream_v2(handle *h, void *stream) { (void)h; (void)stream; return 0; }
int cublasSetMathMode(handle *h, int mode) { h->math_mode = mode; return 0; }

static float at(const float *X, int ld, int trans, int r, int c) {
    return trans ? X[c + (long)r * ld] : X[r + (long)c * ld];
}

int cublasSgemm_v2(handle *h, int ta, int tb, int m, int n, int k, const float *alpha,
                   const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                   int ldc) {
    (void)h;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0.0;
            for (int p = 0; p < k; p++) acc += (double)at(A, lda, ta, i, p) * at(B, ldb, tb, p, j);
            float *c = C + i + (long)j * ldc;
            *c = (float)(*alpha * acc + (*beta == 0.0f ? 0.0 : (double)*beta * *c));
        }
    return 0;
}
