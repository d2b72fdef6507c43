/* PowerSums on the CPU: one sweep over a row's tokens accumulates every order k at once,
 * so the [rows, T, D] gather per order is never formed. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "threads.h"

/* The forward works on blocks of MK_POWER_COLS columns: each block's K sums stay in
 * registers or L1 over all of a row's tokens and are written once, and each token's
 * powers are formed in registers (no per-token copy of its embedding). Every sum is still
 * e^(k+1) (by the same chain of products) added over the tokens in order from 0, so the
 * bits are those of the plain per-token loop. */
#define MK_POWER_COLS 16

/* acc[k * MK_POWER_COLS + c] += e[c] ** (k + 1) for c < n, with K a constant. */
static inline __attribute__((always_inline)) void add_powers_fixed(const float *e, int64_t n,
                                                                   int64_t K, float *acc) {
#pragma omp simd
    for (int64_t c = 0; c < n; c++) {
        float p = e[c];
        for (int64_t k = 0; k < K; k++) {
            acc[k * MK_POWER_COLS + c] += p;
            p *= e[c];
        }
    }
}

/* The same for any K: the k loop outside, the running power in `p`. */
static void add_powers_any(const float *e, int64_t n, int64_t K, float *acc) {
    float p[MK_POWER_COLS];
#pragma omp simd
    for (int64_t c = 0; c < n; c++) {
        acc[c] += e[c];
        p[c] = e[c] * e[c];
    }
    for (int64_t k = 1; k < K; k++) {
        float *a = acc + k * MK_POWER_COLS;
#pragma omp simd
        for (int64_t c = 0; c < n; c++) {
            a[c] += p[c];
            p[c] *= e[c];
        }
    }
}

/* out[k, d0 + c] for one row of tokens and one block of n columns; acc holds K blocks. */
static inline __attribute__((always_inline)) void row_block(const float *emb, const int32_t *tok,
                                                            int64_t T, int64_t D, int64_t K,
                                                            int64_t d0, int64_t n, int fixed,
                                                            float *acc, float *o) {
    memset(acc, 0, (size_t)(K * MK_POWER_COLS) * sizeof(float));
    for (int64_t t = 0; t < T; t++) {
        if (tok[t] < 0) continue;
        const float *e = emb + (int64_t)tok[t] * D + d0;
        if (fixed) add_powers_fixed(e, n, K, acc);
        else add_powers_any(e, n, K, acc);
    }
    for (int64_t k = 0; k < K; k++)
        memcpy(o + k * D + d0, acc + k * MK_POWER_COLS, (size_t)n * sizeof(float));
}

static void power_row(const float *emb, const int32_t *tok, int64_t T, int64_t D, int64_t K,
                      float *acc, float *o) {
    for (int64_t d0 = 0; d0 < D; d0 += MK_POWER_COLS) {
        const int64_t n = D - d0 < MK_POWER_COLS ? D - d0 : MK_POWER_COLS;
        /* K of 1 to 4, a constant: the k loop unrolls inside the vectorised column loop;
         * more orders take the general loop */
        switch (K) {
        case 1: row_block(emb, tok, T, D, 1, d0, n, 1, acc, o); break;
        case 2: row_block(emb, tok, T, D, 2, d0, n, 1, acc, o); break;
        case 3: row_block(emb, tok, T, D, 3, d0, n, 1, acc, o); break;
        case 4: row_block(emb, tok, T, D, 4, d0, n, 1, acc, o); break;
        default: row_block(emb, tok, T, D, K, d0, n, 0, acc, o); break;
        }
    }
}

mk_status mk_power_sums_cpu(void *stream, const float *emb, const int32_t *tokens, int64_t rows,
                            int64_t T, int64_t D, int64_t K, float *out) {
    int failed = 0;
#pragma omp parallel num_threads(mk_threads_for_items(rows, rows * T * K * D)) reduction(| : failed)
    {
        /* K blocks of sums, per thread (K is not bounded, so not on the stack) */
        float *acc = malloc((size_t)(K > 0 ? K : 1) * MK_POWER_COLS * sizeof(float));
        if (!acc) failed = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!acc) continue;
            power_row(emb, tokens + r * T, T, D, K, acc, out + r * K * D);
        }
        free(acc);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "power_sums: out of memory for a %lld-float buffer",
                            (long long)(K * MK_POWER_COLS))
                  : MK_OK;
}

/* ge[d] += sum_k (k + 1) g_k[d] e[d]^k by Horner's rule, with K a constant: the k loop
 * unrolls inside the vectorised d loop and the running sum stays in a register. */
static inline __attribute__((always_inline)) void add_grad_fixed(const float *g, const float *e,
                                                                 int64_t D, int64_t K, float *ge) {
#pragma omp simd
    for (int64_t d = 0; d < D; d++) {
        float acc = (float)K * g[(K - 1) * D + d];
        for (int64_t k = K - 2; k >= 0; k--) acc = acc * e[d] + (float)(k + 1) * g[k * D + d];
        ge[d] += acc;
    }
}

/* The same for any K. The k loop is outside the d loop (over a stack block of d) because
 * gcc does not vectorise a simd loop that contains a loop of unknown length: the inner-k
 * form ran scalar. Same operations in the same order as add_grad_fixed. */
static void add_grad_any(const float *g, const float *e, int64_t D, int64_t K, float *ge) {
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
        int64_t n = D - d0 < 64 ? D - d0 : 64;
        float acc[64];
        const float *top = g + (K - 1) * D + d0;
#pragma omp simd
        for (int64_t d = 0; d < n; d++) acc[d] = (float)K * top[d];
        for (int64_t k = K - 2; k >= 0; k--) {
            const float *gk = g + k * D + d0, c = (float)(k + 1);
#pragma omp simd
            for (int64_t d = 0; d < n; d++) acc[d] = acc[d] * e[d0 + d] + c * gk[d];
        }
#pragma omp simd
        for (int64_t d = 0; d < n; d++) ge[d0 + d] += acc[d];
    }
}

/* Every token of every row whose id is in [v0, v1), in order: adds its gradient. */
static inline __attribute__((always_inline)) void scan_tokens(const float *grad, const float *emb,
                                                              const int32_t *tokens, int64_t rows,
                                                              int64_t T, int64_t D, int64_t K,
                                                              int64_t v0, int64_t v1, int fixed,
                                                              float *grad_emb) {
    for (int64_t r = 0; r < rows; r++) {
        const float *g = grad + r * K * D;
        for (int64_t t = 0; t < T; t++) {
            int64_t v = tokens[r * T + t];
            if (v < v0 || v >= v1) continue; /* also skips the -1 sentinel */
            if (fixed) add_grad_fixed(g, emb + v * D, D, K, grad_emb + v * D);
            else add_grad_any(g, emb + v * D, D, K, grad_emb + v * D);
        }
    }
}

mk_status mk_power_sums_backward_cpu(void *stream, const float *grad, const float *emb,
                                     const int32_t *tokens, int64_t rows, int64_t T, int64_t D,
                                     int64_t K, int64_t V, float *grad_emb, void *work,
                                     size_t work_bytes) { /* no scratch: sums in registers */
    if (K < 1) { /* no orders: no gradient */
        memset(grad_emb, 0, (size_t)(V * D) * sizeof(float));
        return MK_OK;
    }
#pragma omp parallel num_threads(mk_threads_for_items(V, rows * T * K * D))
    {
        int64_t v0, v1;
        mk_owned_rows(V, &v0, &v1);
        memset(grad_emb + v0 * D, 0, (size_t)((v1 - v0) * D) * sizeof(float));
        switch (K) { /* K of 1 to 4, a constant; more orders take the general loop */
        case 1: scan_tokens(grad, emb, tokens, rows, T, D, 1, v0, v1, 1, grad_emb); break;
        case 2: scan_tokens(grad, emb, tokens, rows, T, D, 2, v0, v1, 1, grad_emb); break;
        case 3: scan_tokens(grad, emb, tokens, rows, T, D, 3, v0, v1, 1, grad_emb); break;
        case 4: scan_tokens(grad, emb, tokens, rows, T, D, 4, v0, v1, 1, grad_emb); break;
        default: scan_tokens(grad, emb, tokens, rows, T, D, K, v0, v1, 0, grad_emb); break;
        }
    }
    return MK_OK;
}
