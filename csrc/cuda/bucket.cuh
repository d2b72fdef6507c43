/* Grouping entries by an integer key, deterministically: the backbone of every
 * bitwise-reproducible scatter on the GPU (GatherDot's grad_table, PowerSums' grad_emb,
 * PairSums' grad_pair_table).
 *
 * An op writes one key per entry into keys[] (num_keys marks an entry to ignore), then
 * mk_buckets_sort orders the entry ids by key with CUB's radix sort, which is STABLE: within
 * a key the ids stay ascending. starts[k] .. starts[k + 1] is then the range of order[]
 * holding key k, and a kernel that owns key k sums those entries in that order: the same
 * additions in the same order on every run, with no float atomics.
 *
 * The buffers are carved from caller memory (`work`), never allocated here: the training
 * step hands every op the same scratch region of its model's arena (model.c), so a step
 * allocates nothing; the public ops take theirs from the workspace pool (workspace.cuh). */
#ifndef MANAKA_CUDA_BUCKET_CUH
#define MANAKA_CUDA_BUCKET_CUH

#include "workspace.cuh"

typedef struct {
    int64_t n;          /* entries */
    int32_t num_keys;   /* keys are 0 .. num_keys - 1; num_keys itself means "ignore" */
    uint32_t *keys;     /* [n], written by the op before mk_buckets_sort */
    uint32_t *sorted_keys; /* [n] */
    int32_t *ids;       /* [n] 0 .. n - 1 */
    int32_t *order;     /* [n] entry ids sorted by key, stable */
    int32_t *starts;    /* [num_keys + 1] */
    void *temp;         /* CUB's scratch */
    size_t temp_bytes;
} mk_buckets;

/* *bytes = the scratch mk_buckets_carve needs for n entries over num_keys keys, whatever
 * the alignment of the memory it is later given. n and num_keys must be below 2^31 (ids and
 * starts are int32): MK_ERR_VALUE otherwise. Host only: asks CUB, launches nothing. */
mk_status mk_buckets_bytes(int64_t n, int64_t num_keys, size_t *bytes);
/* Points bk's buffers into work[0 .. work_bytes): MK_ERR_VALUE naming `op` if that holds
 * fewer than mk_buckets_bytes(n, num_keys) bytes (nothing is written then). */
mk_status mk_buckets_carve(mk_buckets *bk, int64_t n, int64_t num_keys, void *work,
                           size_t work_bytes, const char *op);
/* Sorts and fills order[] and starts[]; keys[] must be written. */
mk_status mk_buckets_sort(mk_buckets *bk, cudaStream_t stream);

#endif
