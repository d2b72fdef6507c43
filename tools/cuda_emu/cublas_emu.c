/* A stand-in for the cuBLAS entry points manaka loads (csrc/cuda/cublas_dynamic.c), for
 * the emulated build: column-major SGEMM as plain loops over host memory ("device" memory
 * is host memory there). Accumulates in double so it is a reference, not a rival.
 * It also counts handles and the GEMMs run on each stream (cublas_emu_*), so a test can see
 * which stream each GEMM went to when several threads run GEMMs at once. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

typedef struct handle { int math_mode; void *stream; } handle;

#define STREAMS 64
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int handles;
static struct { void *stream; long gemms; } per_stream[STREAMS];

int cublas_emu_handles(void) { return handles; }
long cublas_emu_gemms_on(void *stream) {
    long n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < STREAMS; i++)
        if (per_stream[i].gemms && per_stream[i].stream == stream) n = per_stream[i].gemms;
    pthread_mutex_unlock(&lock);
    return n;
}
void cublas_emu_reset(void) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < STREAMS; i++) per_stream[i].gemms = 0;
    pthread_mutex_unlock(&lock);
}

int cublasCreate_v2(handle **h) {
    *h = calloc(1, sizeof **h);
    if (!*h) return 3; /* CUBLAS_STATUS_ALLOC_FAILED */
    __atomic_fetch_add(&handles, 1, __ATOMIC_RELAXED);
    return 0;
}
int cublasSetStream_v2(handle *h, void *stream) {
    h->stream = stream;
    return 0;
}
int cublasSetMathMode(handle *h, int mode) { h->math_mode = mode; return 0; }

static float at(const float *X, int ld, int trans, int r, int c) {
    return trans ? X[c + (long)r * ld] : X[r + (long)c * ld];
}

int cublasSgemm_v2(handle *h, int ta, int tb, int m, int n, int k, const float *alpha,
                   const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                   int ldc) {
    sched_yield(); /* as a real enqueue takes time: a stream changed meanwhile is the one used */
    void *stream = h->stream;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < STREAMS - 1 && per_stream[i].gemms && per_stream[i].stream != stream) i++;
    per_stream[i].stream = stream;
    per_stream[i].gemms++;
    pthread_mutex_unlock(&lock);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0.0;
            for (int p = 0; p < k; p++) acc += (double)at(A, lda, ta, i, p) * at(B, ldb, tb, p, j);
            float *c = C + i + (long)j * ldc;
            *c = (float)(*alpha * acc + (*beta == 0.0f ? 0.0 : (double)*beta * *c));
        }
    return 0;
}
