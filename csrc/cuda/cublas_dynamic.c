/* cuBLAS entry points resolved with dlopen/dlsym: see cublas_dynamic.h for why. */
#include "cublas_dynamic.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

typedef int (*create_fn)(mk_cublas_handle *);
typedef int (*set_stream_fn)(mk_cublas_handle, void *); /* cudaStream_t is a pointer */
typedef int (*set_math_mode_fn)(mk_cublas_handle, int);
typedef int (*sgemm_fn)(mk_cublas_handle, int, int, int, int, int, const float *, const float *,
                        int, const float *, int, const float *, float *, int);

/* The library and its entry points are written once under `lock`, then only read. Handles:
 * one per (device, stream), created on first use with its stream set once and never
 * changed. One shared handle would need cublasSetStream before each GEMM, and that pair is
 * not atomic: with the GIL released, two models on two threads (or two devices) would run
 * GEMMs on each other's stream, or on a device the handle does not belong to. */
#define MK_CUBLAS_MAX_HANDLES 64
static struct {
    pthread_mutex_t lock;
    void *library;
    char path[1024];
    create_fn create;
    set_stream_fn set_stream;
    set_math_mode_fn set_math_mode;
    sgemm_fn sgemm;
    int tf32;
    int count;
    struct {
        int device;
        void *stream;
        mk_cublas_handle handle;
    } handles[MK_CUBLAS_MAX_HANDLES];
} cublas = {PTHREAD_MUTEX_INITIALIZER};

int mk_cublas_current_device(void); /* streams.cu */

static mk_status load_locked(const char *path) {
    const char *candidates[] = {path, "libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *lib = NULL;
    const char *found = NULL;
    for (size_t i = 0; i < sizeof candidates / sizeof *candidates && !lib; i++) {
        if (!candidates[i]) continue;
        lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        found = candidates[i];
    }
    if (!lib)
        return mk_fail(MK_ERR_RUNTIME,
                       "cuBLAS not found (tried %s, libcublas.so.13, libcublas.so.12): install "
                       "the nvidia-cublas wheel or put the CUDA toolkit's lib64 on "
                       "LD_LIBRARY_PATH",
                       path ? path : "no explicit path");
    cublas.create = (create_fn)dlsym(lib, "cublasCreate_v2");
    cublas.set_stream = (set_stream_fn)dlsym(lib, "cublasSetStream_v2");
    cublas.set_math_mode = (set_math_mode_fn)dlsym(lib, "cublasSetMathMode");
    cublas.sgemm = (sgemm_fn)dlsym(lib, "cublasSgemm_v2");
    if (!cublas.create || !cublas.set_stream || !cublas.set_math_mode || !cublas.sgemm) {
        dlclose(lib);
        return mk_fail(MK_ERR_RUNTIME, "%s lacks the cuBLAS v2 entry points", found);
    }
    cublas.library = lib;
    snprintf(cublas.path, sizeof cublas.path, "%s", found);
    return MK_OK;
}

mk_status mk_cublas_load(const char *path) {
    pthread_mutex_lock(&cublas.lock);
    mk_status status = cublas.library ? MK_OK : load_locked(path);
    pthread_mutex_unlock(&cublas.lock);
    return status;
}

const char *mk_cublas_path(void) { return cublas.path; }

int mk_cublas_handle_count(void) {
    pthread_mutex_lock(&cublas.lock);
    int n = cublas.count;
    pthread_mutex_unlock(&cublas.lock);
    return n;
}

/* The handle of (current device, stream), created on first use. */
static mk_status handle_for(void *stream, mk_cublas_handle *out) {
    int device = mk_cublas_current_device();
    mk_status status = MK_OK;
    pthread_mutex_lock(&cublas.lock);
    int i = 0;
    while (i < cublas.count && !(cublas.handles[i].device == device && cublas.handles[i].stream == stream)) i++;
    if (i == cublas.count) {
        mk_cublas_handle h = NULL;
        int rc;
        if (cublas.count == MK_CUBLAS_MAX_HANDLES)
            status = mk_fail(MK_ERR_RUNTIME, "cuBLAS: more than %d (device, stream) pairs ran GEMMs",
                             MK_CUBLAS_MAX_HANDLES);
        else if ((rc = cublas.create(&h)) != 0)
            status = mk_fail(MK_ERR_RUNTIME, "cublasCreate failed with status %d (from %s)", rc, cublas.path);
        else if ((rc = cublas.set_stream(h, stream)) != 0 ||
                 (rc = cublas.set_math_mode(h, cublas.tf32 ? MK_CUBLAS_TF32_TENSOR_OP_MATH
                                                           : MK_CUBLAS_DEFAULT_MATH)) != 0)
            status = mk_fail(MK_ERR_RUNTIME, "cublasSetStream/SetMathMode failed with status %d", rc);
        if (status == MK_OK) {
            cublas.handles[i].device = device;
            cublas.handles[i].stream = stream;
            cublas.handles[i].handle = h;
            cublas.count++;
        } /* a handle whose setup failed is leaked: cublasDestroy is not among the entry points */
    }
    if (status == MK_OK) *out = cublas.handles[i].handle;
    pthread_mutex_unlock(&cublas.lock);
    return status;
}

mk_status mk_cublas_allow_tf32(int allow) {
    mk_status status = mk_cublas_load(NULL);
    if (status != MK_OK) return status;
    int rc = 0;
    pthread_mutex_lock(&cublas.lock);
    cublas.tf32 = allow != 0;
    for (int i = 0; i < cublas.count && rc == 0; i++)
        rc = cublas.set_math_mode(cublas.handles[i].handle, allow ? MK_CUBLAS_TF32_TENSOR_OP_MATH
                                                                  : MK_CUBLAS_DEFAULT_MATH);
    pthread_mutex_unlock(&cublas.lock);
    return rc ? mk_fail(MK_ERR_RUNTIME, "cublasSetMathMode failed with status %d", rc) : MK_OK;
}

mk_status mk_cublas_sgemm(void *stream, int trans_a, int trans_b, int m, int n, int k,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc) {
    mk_status status = mk_cublas_load(NULL);
    mk_cublas_handle h = NULL;
    if (status == MK_OK) status = handle_for(stream, &h);
    if (status != MK_OK) return status;
    extern unsigned long long mk_cuda_launches; /* counters.c: counted like a kernel launch */
    __atomic_fetch_add(&mk_cuda_launches, 1ull, __ATOMIC_RELAXED);
    int rc = cublas.sgemm(h, trans_a ? MK_CUBLAS_OP_T : MK_CUBLAS_OP_N,
                          trans_b ? MK_CUBLAS_OP_T : MK_CUBLAS_OP_N, m, n, k, &alpha, A, lda, B,
                          ldb, &beta, C, ldc);
    return rc ? mk_fail(MK_ERR_RUNTIME, "cublasSgemm failed with status %d (m=%d n=%d k=%d)", rc,
                        m, n, k)
              : MK_OK;
}
