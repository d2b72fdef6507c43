/* Staging's batch slots: double-buffered batches over mk_backend; see staging.h (which also
 * says how they relate to the CUDA backend's pinned ring) and staging_slots.h. */
#include <stdlib.h>

#include "staging_slots.h"
#include "staging.h"
#include "arena.h"
#include "checked.h"

#define S 2 /* perspectives */

/* One slot's arrays (device memory), laid out for the capacity (cap_B, cap_L). */
typedef struct {
    int32_t *tokens, *legal, *counts, *target;
    float *value, *soft;
} slot_arrays;

struct mk_staging {
    const mk_backend *be;
    void *stream;      /* the model's: steps */
    void *copy_stream; /* copies of host batches, checks of device batches */
    void *copied[MK_STAGING_SLOTS], *done[MK_STAGING_SLOTS];
    mk_staging_slots slots;
    int current; /* the slot between begin and end, -1 outside */
    int64_t T, cap_B, cap_L;
    void *memory;
    void *check_work; /* batch_check's answer (MK_BATCH_CHECK_WORK_BYTES), made once */
    slot_arrays slot[MK_STAGING_SLOTS];
};


/* Carves both slots from `base` (NULL: only measures) for (B, L); returns the bytes, or
 * SIZE_MAX when a product or the total is above MK_MAX_ELEMENTS (checked.h): B and L
 * come from the caller's batch. */
static size_t carve(mk_staging *s, char *base, int64_t B, int64_t L) {
    int64_t used = 0, n; /* in 4-byte items */
    int too_big = 0;
    for (int k = 0; k < MK_STAGING_SLOTS; k++) {
        slot_arrays *a = &s->slot[k];
        MK_ARENA_TAKE(a->tokens, int32_t, B, S * s->T); /* T <= 1024 (mk_config_check) */
        MK_ARENA_TAKE(a->legal, int32_t, B, L);
        MK_ARENA_TAKE(a->counts, int32_t, B, 1);
        MK_ARENA_TAKE(a->target, int32_t, B, 1);
        MK_ARENA_TAKE(a->value, float, B, 1);
        MK_ARENA_TAKE(a->soft, float, B, L);
    }
    return too_big ? SIZE_MAX : (size_t)used * 4;
}

static mk_status synchronize_both(mk_staging *s) {
    mk_status st = s->be->synchronize(s->copy_stream);
    return st == MK_OK ? s->be->synchronize(s->stream) : st;
}

/* Room for (B, L) in both slots. Growing frees memory a step or a copy may still use, so
 * both streams are drained first; then nothing is in flight and the slots start afresh. */
static mk_status reserve(mk_staging *s, int64_t B, int64_t L) {
    if (B <= s->cap_B && L <= s->cap_L) return MK_OK;
    int64_t cap_B = B > s->cap_B ? B : s->cap_B, cap_L = L > s->cap_L ? L : s->cap_L;
    mk_status st = synchronize_both(s);
    if (st != MK_OK) return st;
    size_t bytes = carve(s, NULL, cap_B, cap_L);
    void *memory = NULL;
    if (bytes == SIZE_MAX)
        st = mk_fail(MK_ERR_NOMEM, "Model: the batch slots for B = %lld positions with L = %lld "
                     "legal slots would take more than 2^58 bytes", (long long)cap_B,
                     (long long)cap_L);
    if (st != MK_OK || (st = s->be->alloc(s->stream, bytes, &memory)) != MK_OK) {
        carve(s, s->memory, s->cap_B, s->cap_L); /* unchanged: keep the old slots */
        return st;
    }
    s->be->free(s->stream, s->memory);
    s->memory = memory;
    s->cap_B = cap_B;
    s->cap_L = cap_L;
    carve(s, memory, cap_B, cap_L);
    mk_staging_slots_reset(&s->slots);
    return MK_OK;
}

mk_status mk_staging_create(const mk_backend *be, void *stream, int64_t T,
                                mk_staging **out) {
    *out = NULL;
    mk_staging *s = calloc(1, sizeof *s);
    if (!s) return mk_fail(MK_ERR_NOMEM, "Model: out of memory");
    s->be = be;
    s->stream = stream;
    s->T = T;
    s->current = -1;
    mk_status st = be->stream_create(&s->copy_stream);
    if (st == MK_OK) st = be->alloc(stream, MK_BATCH_CHECK_WORK_BYTES, &s->check_work);
    for (int k = 0; k < MK_STAGING_SLOTS && st == MK_OK; k++) {
        if ((st = be->event_create(&s->copied[k])) == MK_OK) st = be->event_create(&s->done[k]);
    }
    if (st != MK_OK) {
        mk_staging_destroy(s);
        return st;
    }
    *out = s;
    return MK_OK;
}

void mk_staging_destroy(mk_staging *s) {
    if (!s) return;
    (void)synchronize_both(s); /* nothing may still read or write the slots; no one to tell */
    for (int k = 0; k < MK_STAGING_SLOTS; k++) {
        if (s->copied[k]) s->be->event_destroy(s->copied[k]);
        if (s->done[k]) s->be->event_destroy(s->done[k]);
    }
    s->be->free(s->stream, s->memory);
    s->be->free(s->stream, s->check_work);
    s->be->stream_destroy(s->copy_stream);
    free(s);
}

mk_status mk_staging_check(mk_staging *s, const char *op, const mk_batch *b, int64_t V,
                               int64_t M, int with_targets) {
    if (!b->on_device) return mk_batch_check(op, b, V, M, s->T, with_targets);
    mk_status st = mk_batch_check_shape(op, b, s->T, with_targets);
    if (st != MK_OK) return st;
    mk_fault fault;
    if ((st = s->be->batch_check(s->copy_stream, b, V, M, with_targets, &fault, s->check_work,
                                 MK_BATCH_CHECK_WORK_BYTES)) != MK_OK)
        return st;
    return mk_batch_fault_status(op, b, V, M, &fault);
}


mk_status mk_staging_begin(mk_staging *s, const mk_batch *in, mk_batch *out) {
    const mk_backend *be = s->be;
    *out = *in;
    if (!in->on_device) MK_TRY(reserve(s, in->B, in->L));
    mk_staging_slot_plan plan = mk_staging_slots_take(&s->slots);
    s->current = plan.slot;
    if (plan.sync_first) MK_TRY(synchronize_both(s));
    if (!in->on_device) {
        slot_arrays *a = &s->slot[plan.slot];
        int64_t B = in->B, L = in->L;
        if (plan.wait_done) MK_TRY(be->stream_wait_event(s->copy_stream, s->done[plan.slot]));
#define PUT(dst, src, count) \
    if (src) MK_TRY(be->to_device(s->copy_stream, (dst), (src), (size_t)(count) * 4))
        PUT(a->tokens, in->tokens, B * S * in->T);
        PUT(a->legal, in->legal, B * L);
        PUT(a->counts, in->counts, B);
        PUT(a->target, in->target, B);
        PUT(a->value, in->value, B);
        PUT(a->soft, in->policy_target, B * L);
#undef PUT
        out->tokens = a->tokens;
        out->legal = a->legal;
        out->counts = a->counts;
        out->target = in->target ? a->target : NULL;
        out->value = in->value ? a->value : NULL;
        out->policy_target = in->policy_target ? a->soft : NULL;
        out->on_device = 1;
    }
    /* a device batch: its producers were ordered before the copy stream (the binding),
     * and its check ran there; the step waits for both through this event */
    MK_TRY(be->event_record(s->copy_stream, s->copied[plan.slot]));
    return be->stream_wait_event(s->stream, s->copied[plan.slot]);
}

mk_status mk_staging_end(mk_staging *s) {
    if (s->current < 0) return MK_OK;
    int slot = s->current;
    s->current = -1;
    mk_status st = s->be->event_record(s->stream, s->done[slot]);
    if (st != MK_OK) { /* the slot's last reader is unknown: drain both before reusing it */
        (void)synchronize_both(s);
        mk_staging_slots_reset(&s->slots);
        return st;
    }
    mk_staging_slots_finish(&s->slots, slot);
    return MK_OK;
}

int mk_staging_next_slot(const mk_staging *s) { return mk_staging_slots_peek(&s->slots); }

mk_status mk_staging_wait_slot(mk_staging *s, int slot) {
    if (slot < 0 || slot >= MK_STAGING_SLOTS) return MK_OK;
    if (s->slots.busy[slot]) return synchronize_both(s);
    return s->slots.recorded[slot] ? s->be->event_synchronize(s->done[slot]) : MK_OK;
}

void *mk_staging_stream(const mk_staging *s) { return s->copy_stream; }
