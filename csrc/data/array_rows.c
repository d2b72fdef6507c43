/* A dataset's arrays as a row source: see array_rows.h. */
#include "array_rows.h"

#include <stdio.h>
#include <string.h>

/* Row p's first legal id and count from its offsets, read once from the map and checked:
 * the count, or -1 with the error. */
static int read_offsets(const mk_array_rows *rows, int64_t p, int64_t *first, char *error) {
    const mk_dataset_view *d = &rows->view;
    const volatile int64_t *off = d->legal_offsets; /* volatile: one read per use, never re-read */
    int64_t start = off[p], end = off[p + 1];
    /* 0 <= start <= end <= total_moves first: end - start cannot overflow then (a rewritten
     * end of INT64_MIN made it signed overflow; UBSan, tools/sanitize.sh asan) */
    int64_t c = start < 0 || end < start || end > d->total_moves ? 0 : end - start;
    if (c < 1 || c > rows->max_count) {
        snprintf(error, MK_ROW_ERROR_BYTES,
                 "Loader: the dataset changed under the running loader: legal_offsets of "
                 "position %lld now give [%lld, %lld) (legal_moves has %lld entries, the "
                 "longest list was %lld); a file was rewritten: open the dataset again",
                 (long long)p, (long long)start, (long long)end, (long long)d->total_moves,
                 (long long)rows->max_count);
        return -1;
    }
    *first = start;
    return (int)c; /* max_count <= INT32_MAX: mk_loader_create */
}

static int array_count(const void *ctx, int64_t p, char *error) {
    int64_t start;
    return read_offsets(ctx, p, &start, error);
}

static int array_fill(const void *ctx, int64_t p, int32_t *tokens, int32_t *legal,
                      int32_t *target, float *value, float *policy, char *error) {
    const mk_array_rows *rows = ctx;
    const mk_dataset_view *d = &rows->view;
    int64_t start;
    int c = read_offsets(rows, p, &start, error);
    if (c < 0) return -1;
    int64_t T2 = 2 * d->tokens_per_side;
    const int16_t *tok = d->tokens + p * T2;
    for (int64_t t = 0; t < T2; t++) tokens[t] = tok[t];
    if (d->moves_itemsize == 2) {
        const int16_t *mv = (const int16_t *)d->legal_moves + start;
        for (int64_t l = 0; l < c; l++) legal[l] = mv[l];
    } else {
        memcpy(legal, (const int32_t *)d->legal_moves + start, (size_t)c * 4);
    }
    if (policy) memcpy(policy, d->policy_target + start, (size_t)c * 4);
    *target = d->target[p];
    *value = d->value[p];
    return (int)c;
}

/* Starts the loads of [from, from + bytes), every cache line of it. */
static void prefetch_bytes(const void *from, int64_t bytes) {
    const char *p = from;
    for (int64_t k = 0; k < bytes; k += 64) __builtin_prefetch(p + k);
    __builtin_prefetch(p + bytes - 1);
}

/* A shuffled epoch reads positions at random places of the files: start the loads of the
 * row's tokens, target, value and legal ids ahead of its fill (a producer is otherwise
 * bound by those misses). The legal ids' place is given by the offsets, read here only to
 * aim the prefetch: fill reads and checks them again, and a prefetch never faults. */
static void array_prefetch(const void *ctx, int64_t p) {
    const mk_array_rows *rows = ctx;
    const mk_dataset_view *d = &rows->view;
    int64_t T2 = 2 * d->tokens_per_side, start = d->legal_offsets[p], end = d->legal_offsets[p + 1];
    prefetch_bytes(d->tokens + p * T2, T2 * 2);
    __builtin_prefetch(d->target + p);
    __builtin_prefetch(d->value + p);
    if (0 <= start && start < end && end <= d->total_moves && end - start <= rows->max_count) {
        prefetch_bytes((const char *)d->legal_moves + start * d->moves_itemsize,
                       (end - start) * d->moves_itemsize);
        if (d->policy_target) prefetch_bytes(d->policy_target + start, (end - start) * 4);
    }
}

mk_row_source mk_array_row_source(const mk_array_rows *rows) {
    const mk_dataset_view *d = &rows->view;
    return (mk_row_source){
        .num_rows = d->num_positions,
        .tokens_per_side = d->tokens_per_side,
        .max_legal = rows->max_count,
        .num_tokens = d->num_tokens,
        .num_moves = d->num_moves,
        .ctx = rows,
        .fill = array_fill,
        .prefetch = array_prefetch,
        .count = array_count,
        .soft = d->policy_target != NULL,
    };
}
