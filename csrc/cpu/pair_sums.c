/* PairSums on the CPU: sums of pair-table rows over every unordered pair of a row's
 * tokens. The pair table is large (44 M floats at the seed shapes) and mostly cold, so
 * the forward pass is bound by gathering one P-float row per pair. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "pair_groups.h"
#include "threads.h"

/* Rows are requested this many pairs before they are summed: the pair table is read at
 * random rows, and without the hint each row is a miss the sum waits for (one at a time).
 * With it ~16 misses are in flight, about what one core's fill buffers hold. The pairs are
 * listed first, in the same (j, i) order they are summed in, so the bits are unchanged. */
#define MK_PAIR_PREFETCH 16
/* Pairs listed at once (a stack block; rows with more pairs take several blocks). */
#define MK_PAIR_BLOCK 1024
/* Row widths up to this are summed in a stack block the compiler keeps in registers
 * (a sum through `out` waits on a store and a reload for every pair). */
#define MK_PAIR_REG_P 16

/* o[p] += block[k][p] for k < n, rows requested MK_PAIR_PREFETCH ahead. With P a
 * constant the sums stay in registers; the adds are the same, in the same order. */
static inline __attribute__((always_inline)) void sum_rows(const float *const *block, int64_t n,
                                                           int64_t P, float *o) {
    float acc[MK_PAIR_REG_P];
    const int in_regs = P <= MK_PAIR_REG_P;
    float *a = in_regs ? acc : o;
    if (in_regs)
        for (int64_t p = 0; p < P; p++) acc[p] = o[p];
    for (int64_t k = 0; k < n; k++) {
        if (k + MK_PAIR_PREFETCH < n) {
            const float *ahead = block[k + MK_PAIR_PREFETCH];
            __builtin_prefetch(ahead);
            __builtin_prefetch(ahead + (P > 0 ? P - 1 : 0)); /* a row may straddle two lines */
        }
        const float *row = block[k];
#pragma omp simd
        for (int64_t p = 0; p < P; p++) a[p] += row[p];
    }
    if (in_regs)
        for (int64_t p = 0; p < P; p++) o[p] = acc[p];
}

mk_status mk_pair_sums_cpu(void *stream, const float *pair_table, const int32_t *tokens,
                           int64_t rows, int64_t T, int64_t P, float *out) {
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(rows, rows * T * (T - 1) / 2 * P))
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *tok = tokens + r * T;
        float *o = out + r * P;
        memset(o, 0, (size_t)P * sizeof(float));
        const float *block[MK_PAIR_BLOCK];
        int64_t j = 1, i = 0;
        while (j < T) {
            int64_t n = 0; /* list up to MK_PAIR_BLOCK rows, resuming at pair (i, j) */
            for (; j < T && n < MK_PAIR_BLOCK; j++, i = 0) {
                if (tok[j] < 0) continue;
                for (; i < j && n < MK_PAIR_BLOCK; i++)
                    if (tok[i] >= 0) block[n++] = pair_table + mk_pair_index(tok[i], tok[j]) * P;
                if (i < j) break; /* block full inside this j: resume at (i, j) */
            }
            if (P == 16) sum_rows(block, n, 16, o); /* the seed shapes' width, a constant */
            else sum_rows(block, n, P, o);
        }
    }
    return MK_OK;
}

/* Group h of the gradient (the rows whose larger token is h, contiguous in the table) is
 * summed in a cache-resident buffer by pair_groups.c and written once, in order: the
 * 176 MB table is streamed instead of updated at 1.6 M random rows, and needs no zeroing
 * pass (every group is written, empty ones as zeros). Same bits as summing in (row, pair)
 * order, for any thread count. */
typedef struct {
    float *out;
    int64_t P;
} group_writer;

static void write_group(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                        int32_t n_touched) {
    (void)touched, (void)n_touched;
    const group_writer *w = ctx;
    memcpy(w->out + mk_num_pairs(h) * w->P, acc, (size_t)((h + 1) * w->P) * sizeof(float));
}

mk_status mk_pair_sums_backward_cpu(void *stream, const float *grad, const int32_t *tokens,
                                    int64_t rows, int64_t T, int64_t P, int64_t num_pairs,
                                    float *grad_pair_table, void *scratch, size_t scratch_bytes) {
    /* Allocates its own scratch: the table's scratch_bytes holds none for it. */
    int64_t V = mk_vocab_of_pairs(num_pairs);
    if (V < 0)
        return mk_fail(MK_ERR_VALUE, "pair_sums_backward: %lld rows is not V (V + 1) / 2",
                       (long long)num_pairs);
    MK_TRY(mk_pair_groups_check("pair_sums_backward", rows, T));
    int32_t *work = malloc((size_t)mk_pair_adamw_work_ints(rows, T, V) * sizeof(int32_t));
    if (!work) return mk_fail(MK_ERR_NOMEM, "pair_sums_backward: out of memory for its scratch");
    group_writer w = {grad_pair_table, P};
    mk_status status = mk_pair_grad_groups_cpu(grad, tokens, rows, T, P, V, work, 0, write_group, &w);
    free(work);
    return status;
}
