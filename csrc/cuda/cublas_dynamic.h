/* cuBLAS, loaded at run time.
 *
 * Why not link it: the CUDA toolkit on a build machine often lacks cuBLAS (it ships as the
 * 400+ MB nvidia-cublas wheel), and a link-time dependency would make `import manaka._cuda`
 * fail wherever that library is not on the loader path. Only five entry points are needed,
 * and their C ABI has been stable since CUDA 10, so we declare them here, dlopen the
 * library on first use (from the path manaka/cuda.py found, or the loader's own search),
 * and report a clear error if it is missing. */
#ifndef MANAKA_CUDA_CUBLAS_DYNAMIC_H
#define MANAKA_CUDA_CUBLAS_DYNAMIC_H

#include "core/manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mk_cublas_context *mk_cublas_handle;
enum { MK_CUBLAS_OP_N = 0, MK_CUBLAS_OP_T = 1 };
enum { MK_CUBLAS_DEFAULT_MATH = 0, MK_CUBLAS_TF32_TENSOR_OP_MATH = 3 };

/* Loads cuBLAS from `path` (or, if NULL, the loader's search for libcublas.so.13/.12);
 * idempotent and thread-safe. Handles are made on first use, one per (device, stream). */
mk_status mk_cublas_load(const char *path);
/* The path cuBLAS was loaded from, or "" if it is not loaded. */
const char *mk_cublas_path(void);
/* How many cuBLAS handles exist: one per (device, stream) that has run a GEMM. */
int mk_cublas_handle_count(void);
/* Selects FP32 (default) or TF32 tensor-core GEMMs for every later mk_cublas_sgemm. */
mk_status mk_cublas_allow_tf32(int allow);
/* Column-major cublasSgemm on `stream` (a cudaStream_t) of the current device, through
 * that pair's own handle, with host-side alpha and beta. */
mk_status mk_cublas_sgemm(void *stream, int trans_a, int trans_b, int m, int n, int k,
                          float alpha, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc);

#ifdef __cplusplus
}
#endif
#endif
