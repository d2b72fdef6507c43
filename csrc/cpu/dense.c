/* Elementwise layers around the GEMMs: bias (+ ReLU) forward and backward, sigmoid. */
#include <math.h>
#include <string.h>

#include "backend_cpu.h"
#include "threads.h"

mk_status mk_bias_act_cpu(void *stream, float *y, const float *bias, int64_t rows, int64_t cols,
                          int relu) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for(rows * cols))
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * cols;
        if (relu) {
#pragma omp simd
            for (int64_t c = 0; c < cols; c++) {
                float s = yr[c] + bias[c];
                yr[c] = s > 0.0f ? s : 0.0f;
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < cols; c++) yr[c] += bias[c];
        }
    }
    return MK_OK;
}

/* dbias is a column sum: each thread owns a range of columns and sums every row in order,
 * so the result does not depend on the thread count. */
mk_status mk_bias_act_backward_cpu(void *stream, float *dy, const float *y, int64_t rows,
                                   int64_t cols, int relu, float *dbias) {
    (void)stream;
#pragma omp parallel num_threads(mk_threads_for(rows * cols))
    {
        if (relu) {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < rows; r++) {
                float *d = dy + r * cols;
                const float *yr = y + r * cols;
#pragma omp simd
                for (int64_t c = 0; c < cols; c++) d[c] = yr[c] > 0.0f ? d[c] : 0.0f;
            }
        }
        int64_t c0, c1;
        mk_owned_rows(cols, &c0, &c1);
        if (c1 > c0) {
            memset(dbias + c0, 0, (size_t)(c1 - c0) * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                const float *d = dy + r * cols;
#pragma omp simd
                for (int64_t c = c0; c < c1; c++) dbias[c] += d[c];
            }
        }
    }
    return MK_OK;
}

mk_status mk_sigmoid_cpu(void *stream, const float *x, int64_t n, float *out) {
    (void)stream;
    for (int64_t i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-x[i]));
    return MK_OK;
}
