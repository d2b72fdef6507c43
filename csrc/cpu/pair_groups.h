/* The pair table's gradient, one group of rows at a time, for the fused updates of
 * adamw.c (fp32 and bf16 moments): the gradient is never stored whole. */
#ifndef MANAKA_CPU_PAIR_GROUPS_H
#define MANAKA_CPU_PAIR_GROUPS_H
#include "core/backend.h"

/* Scratch of the groups below: each row's present tokens sorted [rows, T], their counts
 * [rows], and the (row, slot) list bucketed by token value ([V + 1] starts and [rows, T]
 * entries). The CPU's scratch_bytes (backend_cpu.c). */
static inline int64_t mk_pair_adamw_work_ints(int64_t rows, int64_t T, int64_t V) {
    return 2 * rows * T + rows + V + 1;
}
/* The (row, slot) positions r * T + j and the bucket counts are int32: MK_OK when the
 * rows * T token slots fit, else MK_ERR_VALUE naming `op` (checked before the scratch is
 * sized, so 2 rows T + rows + V + 1 cannot overflow either: V <= 2^31, checked by
 * mk_vocab_of_pairs). */
static inline mk_status mk_pair_groups_check(const char *op, int64_t rows, int64_t T) {
    if (rows >= 0 && T >= 0 && (T == 0 || rows <= INT32_MAX / T)) return MK_OK;
    return mk_fail(MK_ERR_VALUE,
                   "%s: %lld rows of %lld tokens is more than 2^31 - 1 token slots, the "
                   "most the CPU pair-table backward indexes (int32); split the batch",
                   op, (long long)rows, (long long)T);
}

/* Called once per group h (table rows h (h + 1) / 2 .. + h, the pairs whose larger token is
 * h), from any thread, with the group's gradient acc [(h + 1) P] (exactly
 * pair_sums_backward's rows, same bits). Group results must not depend on the thread.
 * `touched` is NULL when every row of acc is valid (rows no pair of the batch names are 0);
 * in the touched-only mode it lists the n_touched smaller tokens lo whose row
 * h (h + 1) / 2 + lo some pair of the batch names (each once, ascending), and only those
 * rows of acc are valid (acc is NULL when grad was: the rows alone were asked for). */
typedef void (*mk_pair_group_fn)(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                                 int32_t n_touched);

/* Runs `fn` on every group of the pair table's gradient for grad [rows, P] and tokens
 * [rows, T]; `work` of mk_pair_adamw_work_ints(rows, T, V) int32. With `touched_only`, only
 * the rows some pair names are summed (and listed to `fn`), and groups no pair names are
 * skipped; grad may then be NULL (no sums: the rows named, for the catch-up). MK_ERR_NOMEM (no group visited) if a thread's buffer cannot be allocated. */
mk_status mk_pair_grad_groups_cpu(const float *grad, const int32_t *tokens, int64_t rows,
                                  int64_t T, int64_t P, int64_t V, int32_t *work,
                                  int touched_only, mk_pair_group_fn fn, void *ctx);
/* The two halves of mk_pair_grad_groups_cpu: work [mk_pair_adamw_work_ints(rows, T, V)]
 * receives the bucketing of tokens (a pure function of tokens: sorted rows, counts, bucket
 * starts and slots), which the second half reads only; so one bucketing serves any number
 * of group passes over the same tokens (the sparse update's catch-up and its AdamW). */
void mk_pair_bucket_cpu(const int32_t *tokens, int64_t rows, int64_t T, int64_t V, int32_t *work);
mk_status mk_pair_grad_groups_bucketed_cpu(const float *grad, int64_t rows, int64_t T, int64_t P,
                                           int64_t V, const int32_t *work, int touched_only,
                                           mk_pair_group_fn fn, void *ctx);
#endif
