/* manaka's batch producers: C threads that pack positions of a dataset (docs/design.md §4)
 * into a bounded queue of reusable batch buffers.
 *
 * Contract:
 * - The dataset is given as raw pointers into C-contiguous arrays (memory-mapped .npy
 *   files, typically); the caller keeps them alive and unchanged while the loader exists.
 * - Batch n of an epoch always holds positions perm[n * B .. n * B + size) where perm is
 *   the epoch's permutation (seeded by (seed, epoch); the identity without shuffle), or,
 *   sharded, this rank's share of it (below).
 * - Shards (rank r of world_size W): every rank computes the same permutation of all N
 *   positions. Global step k covers perm[k * W * B .. (k + 1) * W * B); rank r's batch k is
 *   the r-th run of B positions of it, so concatenating the ranks' batch k in rank order,
 *   then the steps in order, gives perm back whatever W is. The last, short global batch
 *   (R = N mod W * B positions) is split into W runs in rank order, the first R mod W ranks
 *   taking ceil(R / W) positions and the others floor(R / W); drop_last drops all of it.
 *   Every rank has the same number of batches (a DDP step count); with 0 < R < W some rank
 *   would have an empty last batch, so create() refuses that configuration (unless
 *   drop_last).
 *   Which producer packs a batch never changes its contents, and the consumer receives
 *   batches strictly in order: the queue is a ring of slots, batch n lives in slot
 *   n % num_slots, so the result is identical for 1 or 16 producers.
 * - Legal lists are padded to the batch's own maximum count: legal with -1, policy with 0.
 *   int16 token and move ids are widened to int32.
 * - Buffer reuse: the consumer holds at most one batch; its slot is recycled when the
 *   consumer asks for the next batch (mk_loader_next) or stops the epoch.
 * - Waits are bounded (mk_loader_next takes a timeout) so a caller can check for signals
 *   between waits; producers block only on condition variables that stop() broadcasts.
 * - Nothing here aborts: errors come back as mk_status with mk_error() set.
 */
#ifndef MANAKA_LOADER_H
#define MANAKA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/batch.h"
#include "core/manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A row source: what the producers pack, row by row. A dataset's arrays are one
 * (array_rows.h, made by mk_loader_create), and so are rows the producers make themselves
 * (a game's record files, record_source.h): there is one packer for both. fill writes
 * row `index`'s tokens [2 * T] and legal ids [at most max_legal], the target and the value,
 * and, for a source with soft targets (`soft`), the policy target of each legal id in
 * `policy` (NULL otherwise; finite, >= 0, summing to 1), and returns the legal count
 * (>= 1); 0 leaves the row out of its batch (a bad record that is to be skipped); -1 is an
 * error, described in `error` (MK_ROW_ERROR_BYTES), which the
 * consumer receives from mk_loader_next when it reaches that batch. fill runs on several
 * producer threads at once and must be safe to. */
#define MK_ROW_ERROR_BYTES 512
typedef int (*mk_row_fill)(const void *ctx, int64_t index, int32_t *tokens, int32_t *legal,
                           int32_t *target, float *value, float *policy, char *error);
/* Optional: starts loading what fill will read for row `index` (a producer calls it a few
 * rows ahead: a shuffled epoch reads records at random places of the files, and a cache
 * miss per record cost a fifth of a shogi producer's time). */
typedef void (*mk_row_prefetch)(const void *ctx, int64_t index);
/* Optional: row `index`'s legal count (>= 1, at most max_legal) without filling it, or -1
 * with `error` as fill's, for a source that knows it cheaply (the arrays' offsets). The
 * packer then counts a batch's rows first and has fill write each row at the batch's own
 * stride, skipping the compaction that rows of unknown count need; fill must then give
 * the same count (a source whose rows can change under it, a rewritten file, fails the
 * batch when they differ). A source with count never leaves a row out. */
typedef int (*mk_row_count)(const void *ctx, int64_t index, char *error);
typedef struct {
    int64_t num_rows, tokens_per_side, max_legal;
    int64_t num_tokens, num_moves; /* the ids fill makes are below these (0: no such promise) */
    const void *ctx;
    mk_row_fill fill;
    mk_row_prefetch prefetch; /* NULL: none */
    mk_row_count count;       /* NULL: none */
    int soft;                 /* 1: fill writes policy targets (batches carry policy_target) */
} mk_row_source;

/* A dataset in the on-disk layout of docs/design.md §4, as pointers; or, when `source` is
 * set, a row source (and only num_positions = source->num_rows and tokens_per_side count). */
typedef struct {
    int64_t num_positions;       /* N */
    int64_t tokens_per_side;     /* T; tokens are [N, 2, T] */
    const int16_t *tokens;
    const int64_t *legal_offsets; /* [N + 1], offsets[0] = 0, increasing */
    const void *legal_moves;      /* [total_moves] of int16 or int32 */
    int64_t total_moves;          /* must equal legal_offsets[N] */
    int moves_itemsize;           /* 2 or 4 */
    const int32_t *target;        /* [N] */
    const float *value;           /* [N] */
    const float *policy_target;   /* [offsets[N]] or NULL */
    int64_t num_tokens, num_moves; /* V and M the data was validated against (0: unknown):
                                      every batch is checked against them when packed */
    const mk_row_source *source;  /* NULL: the arrays above */
} mk_dataset_view;

/* The offsets' rules: offsets[0] = 0, offsets[N] = E (the number of legal moves), and
 * every count offsets[i + 1] - offsets[i] >= 1, in that order: *fault = the first broken
 * (MK_FAULT_OFFSET_START, _OFFSET_END with value the offset; MK_FAULT_COUNT with index the
 * position and value its count, INT64_MIN where that does not fit), else kind
 * MK_FAULT_NONE and *max_count the longest list.
 * Whatever reads a list by its offsets checks them here first. */
void mk_find_offsets_fault(const int64_t *offsets, int64_t N, int64_t E, mk_fault *fault,
                           int64_t *max_count);

/* Every rule of a dataset's arrays (not a row source), against V = num_tokens and
 * M = num_moves: the offsets (above), then as mk_find_fault (core/check.h) every token,
 * every legal move, each legal move listed once per position (MK_FAULT_DUPLICATE, index the
 * position, value the smallest repeated move), every target, value and soft target (a
 * position's entries before its sum), each rule over every position before the next.
 * *fault = the first fault (kind MK_FAULT_NONE when none), *max_count the longest list.
 * MK_OK, or MK_ERR_NOMEM (the duplicate check's buffer). dataset_check.c. */
mk_status mk_check_dataset(const mk_dataset_view *data, mk_fault *fault, int64_t *max_count);

typedef struct {
    int64_t batch_size;
    int producers;    /* threads, >= 1 */
    int prefetch;     /* batches that may be ready ahead of the consumer, >= 1 */
    int shuffle;      /* 0: dataset order */
    uint64_t seed;
    int drop_last;    /* 1: the last, short batch of an epoch is skipped */
    int nice;         /* producers' priority below the caller's (Linux nice increment; 0 = same) */
    int64_t rank, world_size; /* this process's shard (see "Shards" above); world_size 0 = 1 */
} mk_loader_config;

/* One packed batch: the model's mk_batch (core/batch.h: B = its rows, S = 2, T, L = its own
 * largest legal count; legal padded with -1 and policy_target with 0 beyond counts[b];
 * policy_target NULL without soft targets) and where it came from. Pointers stay valid
 * until the consumer's next mk_loader_next (or mk_loader_start).
 *
 * The producer that packed it ran the model's check on it (mk_find_fault over
 * mk_batch_rules, core/batch.h, targets included) against the
 * dataset's num_tokens and num_moves, after the last write to the slot; when nothing was
 * found, batch.checked_V / checked_M are those bounds, and a model whose vocabularies hold
 * them skips its own scan (mk_model_check_batch). The dataset was validated when opened,
 * but the producers read it again for every batch from files another process may rewrite:
 * what is vouched for is the slot's contents, not the dataset's. A fault leaves the batch
 * unchecked (0), for the model's check to report in its usual words. */
typedef struct {
    mk_batch batch;
    int64_t epoch, index;       /* which batch of which epoch */
    const int64_t *positions;   /* [B], dataset indices of the rows */
} mk_loader_batch;

typedef struct {
    int64_t batches;        /* delivered to the consumer since creation */
    int64_t positions;      /* positions in those batches */
    double wait_seconds;    /* time the consumer spent blocked in mk_loader_next */
    int queue_depth;        /* batches ready ahead of the consumer now */
    int queue_capacity;     /* = prefetch */
    int running_threads;    /* producer threads alive */
    int64_t skipped;        /* rows a row source left out (packed so far, all epochs) */
} mk_loader_stats;

typedef struct mk_loader mk_loader;

/* Checks the config against the dataset, allocates every buffer (sized for the dataset's
 * largest legal count); starts no thread. */
mk_status mk_loader_create(const mk_dataset_view *data, const mk_loader_config *config,
                           mk_loader **out);

/* Batches per epoch. */
int64_t mk_loader_num_batches(const mk_loader *loader);

/* Stops any running epoch, builds epoch `epoch`'s permutation and starts the producers at
 * batch `first_batch` (0 <= first_batch <= num_batches). */
mk_status mk_loader_start(mk_loader *loader, int64_t epoch, int64_t first_batch);

/* Recycles the batch the consumer held, then waits up to `timeout_s` for the next one.
 * *out = the batch, or NULL with *end = 1 when the epoch is exhausted, or NULL with
 * *end = 0 on timeout. Asking a loader that was stopped mid-epoch is an MK_ERR_RUNTIME.
 * (Producers cannot fail: create() checked every offset they will follow.) */
mk_status mk_loader_next(mk_loader *loader, double timeout_s, const mk_loader_batch **out,
                         int *end);

/* Stops the producers and joins them; the held batch stays readable. Idempotent, and safe
 * from any thread at any time: concurrent stops and starts are serialised (each producer is
 * joined exactly once), and a consumer waiting in mk_loader_next gets MK_ERR_RUNTIME. */
void mk_loader_stop(mk_loader *loader);

void mk_loader_get_stats(mk_loader *loader, mk_loader_stats *stats);

/* Stops and frees everything. NULL is fine. */
void mk_loader_destroy(mk_loader *loader);

#ifdef __cplusplus
}
#endif
#endif /* MANAKA_LOADER_H */
