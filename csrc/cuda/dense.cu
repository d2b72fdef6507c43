/* The dense layers on the GPU: GEMM through cuBLAS (FP32 by default, TF32 when allowed),
 * and the elementwise bias (+ ReLU) forward/backward and sigmoid kernels around it. */
#include "backend_cuda.h"
#include "common.cuh"
#include "cublas_dynamic.h"
#include "core/gemm_check.h"

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix
 * read as column-major is its transpose: so swap the operands, keep the flags. */
mk_status mk_gemm_cuda(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc) {
    if (M < 0 || N < 0 || K < 0) /* as the CPU's gemm: cuBLAS would see them wrapped to int */
        return mk_fail(MK_ERR_VALUE, "gemm: negative dimension (M = %lld, N = %lld, K = %lld)",
                       (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return MK_OK;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX)
        return mk_fail(MK_ERR_VALUE, "gemm: dimensions exceed cuBLAS's 32-bit limit");
    return mk_cublas_sgemm(stream, trans_b, trans_a, (int)N, (int)M, (int)K, alpha, B,
                           (int)ldb, A, (int)lda, beta, C, (int)ldc);
}

/* The calls one after another on the stream: cuBLAS spreads each over the whole GPU.
 * Every call is checked first, as on the CPU, so a bad one writes nothing. */
mk_status mk_gemm_batch_cuda(void *stream, const mk_gemm_call *calls, int count) {
    MK_TRY(mk_gemm_batch_check(calls, count));
    for (int k = 0; k < count; k++) {
        const mk_gemm_call *c = &calls[k];
        MK_TRY(mk_gemm_cuda(stream, c->trans_a, c->trans_b, c->M, c->N, c->K, c->alpha, c->A,
                            c->lda, c->B, c->ldb, c->beta, c->C, c->ldc));
    }
    return MK_OK;
}

__global__ void bias_act_kernel(float *y, const float *bias, int64_t rows, int64_t cols,
                                int relu) {
    int64_t n = rows * cols;
    MK_GRID_STRIDE(i, n) {
        float s = y[i] + bias[i % cols];
        y[i] = relu ? fmaxf(s, 0.0f) : s;
    }
}

mk_status mk_bias_act_cuda(void *stream, float *y, const float *bias, int64_t rows, int64_t cols,
                           int relu) {
    mk_status status = MK_OK;
    if (rows * cols == 0) return MK_OK;
    bias_act_kernel<<<mk_blocks_for(rows * cols, 256), 256, 0, MK_STREAM(stream)>>>(y, bias, rows,
                                                                                   cols, relu);
    MK_CUDA_LAUNCHED("bias_act_kernel");
done:
    return status;
}

/* One block per 32 columns: thread (x, y) walks rows y, y + 8, ... of column x, applying
 * the ReLU mask in place as it reads; the 8 partial sums per column are then added in a
 * fixed order, so dbias is bitwise reproducible. */
#define DBIAS_COLS 32
#define DBIAS_ROWS 8
__global__ void bias_act_backward_kernel(float *dy, const float *y, int64_t rows, int64_t cols,
                                         int relu, float *dbias) {
    __shared__ float partial[DBIAS_ROWS][DBIAS_COLS];
    int64_t c = blockIdx.x * (int64_t)DBIAS_COLS + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
        for (int64_t r = threadIdx.y; r < rows; r += DBIAS_ROWS) {
            int64_t i = r * cols + c;
            float d = dy[i];
            if (relu && y[i] <= 0.0f) {
                d = 0.0f;
                dy[i] = 0.0f;
            }
            sum += d;
        }
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float total = 0.0f;
        for (int k = 0; k < DBIAS_ROWS; k++) total += partial[k][threadIdx.x];
        dbias[c] = total;
    }
}

mk_status mk_bias_act_backward_cuda(void *stream, float *dy, const float *y, int64_t rows,
                                    int64_t cols, int relu, float *dbias) {
    mk_status status = MK_OK;
    if (cols == 0) return MK_OK;
    dim3 block(DBIAS_COLS, DBIAS_ROWS);
    unsigned int blocks = (unsigned int)((cols + DBIAS_COLS - 1) / DBIAS_COLS);
    bias_act_backward_kernel<<<blocks, block, 0, MK_STREAM(stream)>>>(dy, y, rows, cols, relu,
                                                                     dbias);
    MK_CUDA_LAUNCHED("bias_act_backward_kernel");
done:
    return status;
}

__global__ void sigmoid_kernel(const float *x, int64_t n, float *out) {
    MK_GRID_STRIDE(i, n)
        out[i] = 1.0f / (1.0f + expf(-x[i]));
}

mk_status mk_sigmoid_cuda(void *stream, const float *x, int64_t n, float *out) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    sigmoid_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(x, n, out);
    MK_CUDA_LAUNCHED("sigmoid_kernel");
done:
    return status;
}
