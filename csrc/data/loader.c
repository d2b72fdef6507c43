/* Batch producers and the ordered prefetch queue: see loader.h for the contract.
 *
 * Queue: a ring of num_slots = prefetch + 1 buffers (one may be held by the consumer).
 * Batch n is packed into slot n % num_slots, so delivery order is fixed by construction;
 * a producer claims the lowest unclaimed batch once its slot is free. One mutex guards
 * all queue state; `slot_free` wakes producers, `batch_ready` wakes the consumer.
 *
 * A second mutex, `control`, serialises start and stop: stop may come from any thread at
 * any time (a watchdog closing the loader while the consumer's own cleanup stops it), and
 * two callers joining the same producers, or one joining while another creates them, is
 * undefined behaviour (a double pthread_join hangs). `control` is never taken under `lock`. */
#define _GNU_SOURCE
#include "loader.h"
#include "array_rows.h"
#include "core/batch.h"
#include "core/checked.h"
#include "core/hash.h"

#include <errno.h>
#include <pthread.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The clock of batch_ready's timed waits (mk_loader_next's deadline): the monotonic clock,
 * which the condition variable is told to use; macOS has no pthread_condattr_setclock and
 * its timed waits read the real-time clock. */
#ifdef __APPLE__
#define WAIT_CLOCK CLOCK_REALTIME
#else
#define WAIT_CLOCK CLOCK_MONOTONIC
#endif

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

/* A slot's arrays, writable by the producer that fills it; the consumer sees them through
 * `batch` (const), set once the slot is packed and checked. */
typedef struct {
    int32_t *tokens, *legal, *counts, *target;
    float *value, *policy_target; /* policy_target: NULL without soft targets */
    int64_t *positions;
} slot_arrays;

typedef struct {
    int state;
    void *memory;
    slot_arrays w;
    mk_loader_batch batch;
    int failed;                      /* a row source's error while packing this batch */
    char error[MK_ROW_ERROR_BYTES];
} slot;

struct mk_loader {
    mk_dataset_view data;
    const mk_row_source *source;    /* what the producers pack: data.source, or &arrays_source */
    mk_array_rows arrays;           /* the dataset's arrays (no data.source) ... */
    mk_row_source arrays_source;    /* ... as a row source (array_rows.h) */
    int64_t num_tokens, num_moves; /* what each packed batch is checked against (0: not) */
    mk_loader_config config;
    int64_t num_batches, max_count; /* max_count: the dataset's largest legal list */
    int64_t local_positions;        /* this rank's positions per epoch (all of them unsharded) */
    int num_slots;
    slot *slots;
    int64_t *perm; /* this epoch's order: this rank's share of it, [local_positions] first */
    int64_t epoch;

    pthread_mutex_t lock;
    pthread_cond_t slot_free, batch_ready;
    pthread_mutex_t control; /* held by start and stop for their whole run: see the top */
    pthread_t *threads;      /* [num_threads] joinable producers; both guarded by `control` */
    int num_threads, running, stopping;
    int64_t next_claim, next_deliver;
    int held; /* slot held by the consumer, or -1 */
    int ready;

    int64_t delivered_batches, delivered_positions, skipped;
    double wait_seconds;
};

/* ---------------------------------------------------------------- allocation */

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The byte sizes of one slot's arrays for batch_size B, T tokens per side and L legal
 * slots (the policy_target array, when there is one, is as large as legal's), or
 * MK_ERR_VALUE naming batch_size when the slot would be above MK_MAX_ELEMENTS bytes
 * (checked.h): B is the caller's, so the products are checked (unchecked,
 * batch_size = 2^62 wrapped the slot to a 1-byte allocation that pack() overran). */
typedef struct {
    size_t tokens, legal, row, positions, total;
} slot_sizes;
static mk_status slot_size(int64_t B, int64_t T, int64_t L, int policy, slot_sizes *z) {
    int64_t tokens, legal, total;
    if (mk_mul_too_big(B, 2 * T, &tokens) || mk_mul_too_big(B, L, &legal) ||
        mk_mul_too_big(tokens + legal * (1 + policy) + 5 * B + 5 * 16, 4, &total))
        return mk_fail(MK_ERR_VALUE,
                       "Loader: batch_size = %lld is too large: a batch of %lld positions with "
                       "%lld tokens per side and up to %lld legal moves would take more than "
                       "2^56 bytes",
                       (long long)B, (long long)B, (long long)T, (long long)L);
    z->tokens = round64((size_t)tokens * 4);
    z->legal = round64((size_t)legal * 4);
    z->row = round64((size_t)B * 4);
    z->positions = round64((size_t)B * 8);
    z->total = z->tokens + z->legal * (1 + policy) + 3 * z->row + z->positions;
    return MK_OK;
}

/* Batches carry soft targets: the row source makes them (the arrays' source: they have them). */
static int has_policy(const mk_loader *ld) { return ld->source->soft; }

/* Carves one slot's arrays out of one allocation. */
static mk_status alloc_slot(mk_loader *ld, slot *s) {
    slot_sizes z = {0};
    MK_TRY(slot_size(ld->config.batch_size, ld->data.tokens_per_side, ld->max_count,
                     has_policy(ld), &z));
    size_t tokens = z.tokens, legal = z.legal, row = z.row;
    size_t policy = has_policy(ld) ? legal : 0;
    size_t total = z.total;
    void *memory = NULL;
    if (posix_memalign(&memory, 64, total) != 0)
        return mk_fail(MK_ERR_NOMEM, "Loader: cannot allocate a %zu-byte batch buffer "
                       "(batch_size = %lld)", total, (long long)ld->config.batch_size);
    s->memory = memory;
    char *m = memory;
    s->w.tokens = (int32_t *)m, m += tokens;
    s->w.legal = (int32_t *)m, m += legal;
    s->w.counts = (int32_t *)m, m += row;
    s->w.target = (int32_t *)m, m += row;
    s->w.value = (float *)m, m += row;
    s->w.policy_target = policy ? (float *)m : NULL, m += policy;
    s->w.positions = (int64_t *)m;
    s->state = SLOT_FREE;
    return MK_OK;
}

/* ---------------------------------------------------------------- permutation */

/* The next number of the splitmix64 sequence at *x: the core's one hash (hash.h), whose
 * value at (x, 0) is the finaliser of x + golden ratio, exactly splitmix64's step. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = mk_hash64(*x, 0);
    *x += 0x9E3779B97F4A7C15ull;
    return z;
}

/* Unbiased integer in [0, n) (Lemire's multiply-shift with rejection). */
static uint64_t bounded(uint64_t *state, uint64_t n) {
    uint64_t x = splitmix64(state);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n;
        while (low < threshold) {
            x = splitmix64(state);
            m = (__uint128_t)x * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Rank r's local position i -> its index in the global permutation (loader.h, "Shards"):
 * full global steps give r the run [k * W * B + r * B, + B); the last, short global step
 * (R positions) gives it run r of R split into floor/ceil shares in rank order. */
static int64_t global_index(const mk_loader *ld, int64_t i) {
    int64_t B = ld->config.batch_size, W = ld->config.world_size, r = ld->config.rank;
    int64_t N = ld->data.num_positions, full = N / B / W; /* full global steps */
    int64_t k = i / B;
    if (k < full) return k * W * B + r * B + i % B;
    int64_t start = full * W * B, R = N - start, q = R / W, extra = R % W;
    return start + r * q + (r < extra ? r : extra) + (i - full * B);
}

/* Epoch `epoch`'s order: a Fisher-Yates shuffle seeded by (seed, epoch) only, the same on
 * every rank; then this rank's share is moved to the front, in order. global_index(i) >= i
 * and increases with i, so the forward in-place compaction never overwrites a position it
 * still has to read. */
static void build_permutation(mk_loader *ld, int64_t epoch) {
    int64_t N = ld->data.num_positions;
    for (int64_t i = 0; i < N; i++) ld->perm[i] = i;
    if (ld->config.shuffle) {
        uint64_t state = ld->config.seed * 0xD1B54A32D192ED03ull;
        splitmix64(&state);
        state ^= (uint64_t)epoch * 0x8CB92BA72F3D8DD7ull + 0x2545F4914F6CDD1Dull;
        for (int64_t i = N - 1; i > 0; i--) {
            int64_t j = (int64_t)bounded(&state, (uint64_t)i + 1);
            int64_t t = ld->perm[i];
            ld->perm[i] = ld->perm[j];
            ld->perm[j] = t;
        }
    }
    if (ld->config.world_size > 1)
        for (int64_t i = 0; i < ld->local_positions; i++) ld->perm[i] = ld->perm[global_index(ld, i)];
}

/* ---------------------------------------------------------------- reading a live map */

/* A memory-mapped file that another process truncates (np.save rewrites a file in place:
 * truncate, then write) turns reads of the lost pages into SIGBUS, which kills the process.
 * While a loader thread reads the dataset it sets `fault_jump`; a SIGBUS then jumps back to
 * that read, which fails its batch with an error for the consumer. A SIGBUS anywhere else
 * is handed back to whoever handled it before (faulthandler, or the default action): the
 * previous handler is reinstalled and the faulting access, run again, reaches it. */
static __thread sigjmp_buf *fault_jump;
static struct sigaction previous_bus;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void on_bus(int sig, siginfo_t *info, void *context) {
    (void)context;
    sigjmp_buf *jump = fault_jump;
    int sent = info && info->si_code <= 0; /* kill() or raise(), not a fault */
    if (jump && !sent) {
        fault_jump = NULL;
        siglongjmp(*jump, 1);
    }
    sigaction(SIGBUS, &previous_bus, NULL); /* not a loader read: the fault is someone else's */
    if (sent) raise(sig); /* delivered to the previous disposition once this handler returns */
}

static void install_bus_handler(void) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_bus;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    sigaction(SIGBUS, &act, &previous_bus);
}

#define BUS_ERROR                                                                         \
    "Loader: reading the dataset failed with SIGBUS: a memory-mapped file was truncated " \
    "or rewritten under the running loader (write new data to a temporary name and "      \
    "rename it over the old file: a running loader then keeps reading the old contents)"

/* ---------------------------------------------------------------- packing */

/* Slot `s` holds batch `n` of the current epoch, failed: no rows (its error is s->error). */
static void fail_batch(const mk_loader *ld, int64_t n, slot *s) {
    s->failed = 1;
    s->batch = (mk_loader_batch){.batch = {.B = 0, .S = 2, .L = 1}, .epoch = ld->epoch, .index = n};
}

/* Slot `s` holds batch `n` of the current epoch, `size` rows of `L` legal slots packed:
 * describes it as the model's mk_batch, then checks it with the model's rules
 * (mk_batch_rules, mk_find_fault: targets included) against the dataset's vocabularies, after the last write to the slot and on
 * the producer's thread, so that the consumer's model need not (loader.h). */
static void publish(const mk_loader *ld, int64_t n, slot *s, int64_t size, int64_t L) {
    mk_batch *b = &s->batch.batch;
    *b = (mk_batch){.B = size, .S = 2, .T = ld->data.tokens_per_side, .L = L,
                    .tokens = s->w.tokens, .legal = s->w.legal, .counts = s->w.counts,
                    .target = s->w.target, .value = s->w.value,
                    .policy_target = s->w.policy_target};
    s->batch.epoch = ld->epoch;
    s->batch.index = n;
    s->batch.positions = s->w.positions;
    if (size < 1 || ld->num_tokens < 1 || ld->num_moves < 1) return;
    mk_check rules = mk_batch_rules(b, ld->num_tokens, ld->num_moves, 1);
    mk_fault fault;
    mk_find_fault(&rules, &fault);
    if (fault.kind == MK_FAULT_NONE) b->checked_V = ld->num_tokens, b->checked_M = ld->num_moves;
}

/* Fills slot `s` with batch `n` of the current epoch from the row source (the dataset's
 * arrays are one, array_rows.h). Reads only the source and perm, writes only the slot: safe
 * to run in parallel with other producers.
 *
 * Rows of unknown count (a game's records: a bad one may be left out) are made one after
 * another, their legal ids compact (row i at the sum of the counts before it), so a
 * producer writes one run of ~50 ids per shogi position instead of one per max_legal (600)
 * stride spread over megabytes; then, with the batch's own L known, they are spread to
 * stride L from the last row to the first: row i's compact start is at most i * L, so it
 * moves only towards the end, over rows already moved, never over a row still to move.
 * A source that counts its rows cheaply (the arrays' offsets: mk_row_count) is counted
 * first and each row filled at stride L directly, without that second copy. Either way a
 * row's ids start at most at i * Lmax and fill writes at most Lmax of them, so every write
 * stays in the slot (B * Lmax). Left-out rows shorten the batch; returns them. */
/* Pads row i of stride L beyond its count: legal ids with -1, soft targets with 0. */
static void pad(slot_arrays *b, int64_t i, int64_t L) {
    int32_t *row = b->legal + i * L;
    for (int64_t l = b->counts[i]; l < L; l++) row[l] = -1;
    if (b->policy_target) {
        float *prow = b->policy_target + i * L;
        for (int64_t l = b->counts[i]; l < L; l++) prow[l] = 0.0f;
    }
}

static int64_t pack(const mk_loader *ld, int64_t n, slot *s) {
    const mk_row_source *src = ld->source;
    int64_t B = ld->config.batch_size, first = n * B, T2 = 2 * src->tokens_per_side;
    int64_t want = ld->local_positions - first < B ? ld->local_positions - first : B;
    int64_t Lmax = ld->max_count, L = 0, size = 0, skipped = 0, used = 0;
    const int64_t *pos = ld->perm + first;
    slot_arrays *b = &s->w;
    int counted = src->count != NULL;
    s->failed = 0;
    for (int64_t i = 0; counted && i < want; i++) {
        int c = src->count(src->ctx, pos[i], s->error);
        if (c < 1 || c > Lmax) { /* -1: the source's error; else a broken source */
            if (c >= 0)
                snprintf(s->error, sizeof s->error,
                         "Loader: the row source counted %d legal moves for row %lld, outside "
                         "[1, max_legal = %lld]", c, (long long)pos[i], (long long)Lmax);
            fail_batch(ld, n, s);
            return 0;
        }
        b->counts[i] = c;
        if (c > L) L = c;
    }
    enum { AHEAD = 8 }; /* rows prefetched ahead: enough to cover a miss behind a ~1 us row */
    for (int64_t i = 0; src->prefetch && i < AHEAD && i < want; i++) src->prefetch(src->ctx, pos[i]);
    for (int64_t i = 0; i < want; i++) {
        if (src->prefetch && i + AHEAD < want) src->prefetch(src->ctx, pos[i + AHEAD]);
        int64_t at = counted ? size * L : used; /* <= size * Lmax: see above */
        int c = src->fill(src->ctx, pos[i], b->tokens + size * T2, b->legal + at,
                          b->target + size, b->value + size,
                          b->policy_target ? b->policy_target + at : NULL, s->error);
        if (c < 0 || c > Lmax || (counted && c != b->counts[size])) {
            if (c > Lmax) /* more than max_legal: a broken source, refused like an error */
                snprintf(s->error, sizeof s->error,
                         "Loader: the row source made %d legal moves for row %lld, above its "
                         "max_legal = %lld", c, (long long)pos[i], (long long)Lmax);
            else if (c >= 0)
                snprintf(s->error, sizeof s->error,
                         "Loader: the dataset changed under the running loader: row %lld had "
                         "%d legal moves when counted, then %d when packed; a file was "
                         "rewritten: open the dataset again",
                         (long long)pos[i], (int)b->counts[size], c);
            fail_batch(ld, n, s);
            return skipped;
        }
        if (c == 0) {
            skipped++;
            continue;
        }
        if (counted) pad(b, size, L); /* while the row is in the cache */
        b->counts[size] = c;
        b->positions[size] = pos[i];
        used += c;
        if (c > L) L = c;
        size++;
    }
    if (L == 0) L = 1;
    for (int64_t i = size - 1; !counted && i >= 0; i--) {
        used -= b->counts[i];
        memmove(b->legal + i * L, b->legal + used, (size_t)b->counts[i] * 4);
        if (b->policy_target) /* the soft targets, spread alike */
            memmove(b->policy_target + i * L, b->policy_target + used, (size_t)b->counts[i] * 4);
        pad(b, i, L);
    }
    publish(ld, n, s, size, L);
    return skipped;
}

/* pack() with SIGBUS turned into a failed batch (see on_bus). */
static int64_t guarded_pack(const mk_loader *ld, int64_t n, slot *s) {
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1)) { /* a read of the map faulted: the slot is ours, just fail it */
        snprintf(s->error, sizeof s->error, "%s", BUS_ERROR);
        fail_batch(ld, n, s);
        return 0;
    }
    fault_jump = &jump;
    int64_t skipped = pack(ld, n, s);
    fault_jump = NULL;
    return skipped;
}

/* ---------------------------------------------------------------- producers */

/* Producers are background work kept ahead by the queue: on a machine whose cores the
 * training step keeps busy, a lower priority lets the step's threads win every contest for
 * a core, and the producers pack in the gaps (Linux: the nice value is per thread). */
static void lower_priority(int nice_increment) {
#ifdef __linux__
    if (nice_increment <= 0) return;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno == 0) (void)setpriority(PRIO_PROCESS, (id_t)tid, now + nice_increment);
#else
    (void)nice_increment;
#endif
}

static void *producer_main(void *arg) {
    mk_loader *ld = arg;
    lower_priority(ld->config.nice);
    /* Every signal was blocked for this thread (mk_loader_start) except that a blocked SIGBUS
     * from a fault kills the process without calling any handler: let on_bus see it. */
    sigset_t bus;
    sigemptyset(&bus);
    sigaddset(&bus, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
    pthread_mutex_lock(&ld->lock);
    for (;;) {
        while (!ld->stopping && ld->next_claim < ld->num_batches &&
               ld->slots[ld->next_claim % ld->num_slots].state != SLOT_FREE)
            pthread_cond_wait(&ld->slot_free, &ld->lock);
        if (ld->stopping || ld->next_claim >= ld->num_batches) break;
        int64_t n = ld->next_claim++;
        slot *s = &ld->slots[n % ld->num_slots];
        s->state = SLOT_FILLING;
        pthread_mutex_unlock(&ld->lock);
        int64_t skipped = guarded_pack(ld, n, s);
        pthread_mutex_lock(&ld->lock);
        ld->skipped += skipped;
        s->state = SLOT_READY;
        ld->ready++;
        pthread_cond_broadcast(&ld->batch_ready);
    }
    ld->running--;
    pthread_cond_broadcast(&ld->batch_ready);
    pthread_mutex_unlock(&ld->lock);
    return NULL;
}

/* ---------------------------------------------------------------- public API */

/* The offsets decide every memory access of the producers: check them here, whatever
 * the caller validated, so a bad offsets array is an error and never a wild read (the
 * arrays' fill, array_rows.c, checks each offset again when it reads it: the file may
 * change after this scan). */
static mk_status scan_offsets(const mk_dataset_view *data, int64_t *max_count) {
    const int64_t *off = data->legal_offsets;
    mk_fault f;
    mk_find_offsets_fault(off, data->num_positions, data->total_moves, &f, max_count);
    if (f.kind == MK_FAULT_OFFSET_START)
        return mk_fail(MK_ERR_VALUE, "Loader: legal_offsets[0] must be 0, got %lld",
                       (long long)f.value);
    if (f.kind == MK_FAULT_COUNT)
        return mk_fail(MK_ERR_VALUE,
                       "Loader: position %lld: legal_offsets must increase strictly (every "
                       "position needs >= 1 legal move), got legal_offsets[%lld] = %lld, "
                       "legal_offsets[%lld] = %lld",
                       (long long)f.index, (long long)f.index, (long long)off[f.index],
                       (long long)f.index + 1, (long long)off[f.index + 1]);
    if (f.kind == MK_FAULT_OFFSET_END)
        return mk_fail(MK_ERR_VALUE,
                       "Loader: legal_offsets[-1] = %lld but legal_moves has %lld entries",
                       (long long)f.value, (long long)data->total_moves);
    return MK_OK;
}

/* scan_offsets with a SIGBUS (the file truncated under the scan) turned into an error. */
static mk_status guarded_scan(const mk_dataset_view *data, int64_t *max_count) {
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1)) return mk_fail(MK_ERR_VALUE, "%s", BUS_ERROR);
    fault_jump = &jump;
    mk_status status = scan_offsets(data, max_count);
    fault_jump = NULL;
    return status;
}

mk_status mk_loader_create(const mk_dataset_view *data, const mk_loader_config *config,
                           mk_loader **out) {
    *out = NULL;
    pthread_once(&bus_once, install_bus_handler);
    if (config->batch_size < 1)
        return mk_fail(MK_ERR_VALUE, "Loader: batch_size must be >= 1, got %lld",
                       (long long)config->batch_size);
    if (config->producers < 1 || config->producers > 256)
        return mk_fail(MK_ERR_VALUE, "Loader: producers must be in [1, 256], got %d",
                       config->producers);
    if (config->prefetch < 1 || config->prefetch > 1024)
        return mk_fail(MK_ERR_VALUE, "Loader: prefetch must be in [1, 1024], got %d",
                       config->prefetch);
    if (!data->source && data->moves_itemsize != 2 && data->moves_itemsize != 4)
        return mk_fail(MK_ERR_TYPE, "Loader: legal_moves must be int16 or int32");
    if (data->num_positions < 0 || data->tokens_per_side < 1)
        return mk_fail(MK_ERR_VALUE, "Loader: bad dataset shape");
    int64_t max_count = 0;
    if (data->source) {
        if (data->source->max_legal < 1 || data->source->num_rows != data->num_positions ||
            data->source->tokens_per_side != data->tokens_per_side)
            return mk_fail(MK_ERR_VALUE, "Loader: the row source disagrees with the dataset's shape");
        max_count = data->source->max_legal;
        goto checked;
    }
    mk_status scanned = guarded_scan(data, &max_count);
    if (scanned != MK_OK) return scanned;
    if (max_count > INT32_MAX) /* a row's count is an int (mk_row_fill) and an int32 in a batch */
        return mk_fail(MK_ERR_VALUE, "Loader: a position has %lld legal moves, above 2^31 - 1",
                       (long long)max_count);
checked:;
    /* Shards: checked before anything is allocated (world_size 0 = unsharded). */
    int64_t N = data->num_positions, B = config->batch_size;
    int64_t W = config->world_size ? config->world_size : 1, r = config->rank;
    if (W < 1 || r < 0 || r >= W) {
        if (W < 1) return mk_fail(MK_ERR_VALUE, "Loader: world_size must be >= 1, got %lld", (long long)W);
        return mk_fail(MK_ERR_VALUE, "Loader: rank must be in [0, world_size - 1 = %lld], got %lld",
                       (long long)(W - 1), (long long)r);
    }
    /* Global steps of W * B positions; written with divisions only (W * B may overflow). */
    int64_t full = N / B / W, R = N - full * B * W; /* R: the last, short global step */
    if (R > 0 && R < W && !config->drop_last) {
        return mk_fail(MK_ERR_VALUE,
                       "Loader: %lld positions in batches of batch_size = %lld on world_size = %lld "
                       "ranks leave a last step of %lld positions, fewer than the ranks: some rank "
                       "would have no last batch and the step counts would differ; pass "
                       "drop_last=True or another batch_size",
                       (long long)N, (long long)B, (long long)W, (long long)R);
    }
    mk_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return mk_fail(MK_ERR_NOMEM, "Loader: out of memory");
    ld->data = *data;
    ld->config = *config;
    ld->config.world_size = W;
    if (data->source) {
        ld->source = data->source;
    } else {
        ld->arrays = (mk_array_rows){.view = *data, .max_count = max_count};
        ld->arrays_source = mk_array_row_source(&ld->arrays);
        ld->source = &ld->arrays_source;
    }
    ld->num_tokens = ld->source->num_tokens;
    ld->num_moves = ld->source->num_moves;
    int64_t share = config->drop_last ? 0 : R / W + (r < R % W);
    ld->local_positions = full * B + share;
    ld->num_batches = full + (share > 0); /* the same on every rank: share > 0 on all when R >= W */
    ld->max_count = max_count;
    ld->num_slots = config->prefetch + 1;
    ld->held = -1;
    ld->next_claim = ld->next_deliver = ld->num_batches; /* nothing to deliver until start */
    pthread_mutex_init(&ld->lock, NULL);
    pthread_mutex_init(&ld->control, NULL);
    pthread_cond_init(&ld->slot_free, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
#ifndef __APPLE__
    pthread_condattr_setclock(&attr, WAIT_CLOCK);
#endif
    pthread_cond_init(&ld->batch_ready, &attr);
    pthread_condattr_destroy(&attr);
    ld->slots = calloc((size_t)ld->num_slots, sizeof *ld->slots);
    ld->perm = malloc((size_t)(N ? N : 1) * sizeof *ld->perm);
    ld->threads = calloc((size_t)config->producers, sizeof *ld->threads);
    if (!ld->slots || !ld->perm || !ld->threads) {
        mk_loader_destroy(ld);
        return mk_fail(MK_ERR_NOMEM, "Loader: out of memory for %lld positions", (long long)N);
    }
    for (int i = 0; i < ld->num_slots; i++) {
        mk_status st = alloc_slot(ld, &ld->slots[i]);
        if (st != MK_OK) {
            mk_loader_destroy(ld);
            return st;
        }
    }
    *out = ld;
    return MK_OK;
}

int64_t mk_loader_num_batches(const mk_loader *ld) { return ld->num_batches; }

/* Stops and joins the producers; the caller holds `control`, so each thread is joined once. */
static void stop_locked(mk_loader *ld) {
    pthread_mutex_lock(&ld->lock);
    ld->stopping = 1;
    pthread_cond_broadcast(&ld->slot_free);
    pthread_cond_broadcast(&ld->batch_ready);
    pthread_mutex_unlock(&ld->lock);
    for (int i = 0; i < ld->num_threads; i++) pthread_join(ld->threads[i], NULL);
    ld->num_threads = 0;
}

void mk_loader_stop(mk_loader *ld) {
    if (!ld) return;
    pthread_mutex_lock(&ld->control);
    stop_locked(ld);
    pthread_mutex_unlock(&ld->control);
}

mk_status mk_loader_start(mk_loader *ld, int64_t epoch, int64_t first_batch) {
    if (epoch < 0)
        return mk_fail(MK_ERR_VALUE, "Loader: epoch must be >= 0, got %lld", (long long)epoch);
    if (first_batch < 0 || first_batch > ld->num_batches)
        return mk_fail(MK_ERR_VALUE, "Loader: batch index %lld is outside [0, %lld]",
                       (long long)first_batch, (long long)ld->num_batches);
    pthread_mutex_lock(&ld->control);
    stop_locked(ld);
    build_permutation(ld, epoch); /* no producer runs: perm is ours */
    /* The queue state is reset under `lock`: a concurrent mk_loader_get_stats (any thread)
     * reads it, and a consumer that raced a stop may still be leaving mk_loader_next. */
    pthread_mutex_lock(&ld->lock);
    for (int i = 0; i < ld->num_slots; i++) ld->slots[i].state = SLOT_FREE;
    ld->epoch = epoch;
    ld->held = -1;
    ld->ready = 0;
    ld->next_claim = ld->next_deliver = first_batch;
    ld->stopping = 0;
    pthread_mutex_unlock(&ld->lock);
    /* Producers never run Python; blocking signals in them leaves SIGINT to the main
     * thread, whose wait in mk_loader_next wakes up to let Python raise KeyboardInterrupt. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    mk_status status = MK_OK;
    for (int i = 0; i < ld->config.producers; i++) {
        pthread_mutex_lock(&ld->lock);
        ld->running++;
        pthread_mutex_unlock(&ld->lock);
        int rc = pthread_create(&ld->threads[i], NULL, producer_main, ld);
        if (rc != 0) {
            pthread_mutex_lock(&ld->lock);
            ld->running--;
            pthread_mutex_unlock(&ld->lock);
            status = mk_fail(MK_ERR_RUNTIME, "Loader: cannot start producer thread %d: %s", i,
                             strerror(rc));
            break;
        }
        ld->num_threads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (status != MK_OK) stop_locked(ld);
    pthread_mutex_unlock(&ld->control);
    return status;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(WAIT_CLOCK, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

mk_status mk_loader_next(mk_loader *ld, double timeout_s, const mk_loader_batch **out,
                         int *end) {
    *out = NULL;
    *end = 0;
    double begin = now_seconds();
    struct timespec deadline;
    double until = begin + (timeout_s > 0 ? timeout_s : 0);
    deadline.tv_sec = (time_t)until;
    deadline.tv_nsec = (long)((until - (double)deadline.tv_sec) * 1e9);
    pthread_mutex_lock(&ld->lock);
    if (ld->held >= 0) {
        ld->slots[ld->held].state = SLOT_FREE;
        ld->held = -1;
        /* One slot freed: one producer can use it. Waking them all would put every producer
         * on a core at the moment the training loop wants one. */
        pthread_cond_signal(&ld->slot_free);
    }
    mk_status status = MK_OK;
    for (;;) {
        if (ld->next_deliver >= ld->num_batches) {
            *end = 1;
            break;
        }
        int k = (int)(ld->next_deliver % ld->num_slots);
        slot *s = &ld->slots[k];
        if (s->state == SLOT_READY && s->batch.index == ld->next_deliver && s->failed) {
            /* The row source's error reaches the consumer in batch order; the epoch ends. */
            status = mk_fail(MK_ERR_VALUE, "%s", s->error);
            ld->next_deliver = ld->num_batches;
            break;
        }
        if (s->state == SLOT_READY && s->batch.index == ld->next_deliver) {
            s->state = SLOT_HELD;
            ld->held = k;
            ld->ready--;
            ld->next_deliver++;
            ld->delivered_batches++;
            ld->delivered_positions += s->batch.batch.B;
            *out = &s->batch;
            break;
        }
        if (ld->running == 0) {
            status = mk_fail(MK_ERR_RUNTIME,
                             "Loader: no producer is running (the loader was stopped or closed)");
            break;
        }
        if (pthread_cond_timedwait(&ld->batch_ready, &ld->lock, &deadline) == ETIMEDOUT) break;
    }
    ld->wait_seconds += now_seconds() - begin;
    pthread_mutex_unlock(&ld->lock);
    return status;
}

void mk_loader_get_stats(mk_loader *ld, mk_loader_stats *st) {
    pthread_mutex_lock(&ld->lock);
    st->batches = ld->delivered_batches;
    st->positions = ld->delivered_positions;
    st->wait_seconds = ld->wait_seconds;
    st->queue_depth = ld->ready;
    st->queue_capacity = ld->config.prefetch;
    st->running_threads = ld->running;
    st->skipped = ld->skipped;
    pthread_mutex_unlock(&ld->lock);
}

void mk_loader_destroy(mk_loader *ld) {
    if (!ld) return;
    mk_loader_stop(ld);
    if (ld->slots)
        for (int i = 0; i < ld->num_slots; i++) free(ld->slots[i].memory);
    free(ld->slots);
    free(ld->perm);
    free(ld->threads);
    pthread_mutex_destroy(&ld->lock);
    pthread_mutex_destroy(&ld->control);
    pthread_cond_destroy(&ld->slot_free);
    pthread_cond_destroy(&ld->batch_ready);
    free(ld);
}
