/* Staging (staging.h): which of the two batch slots the next batch takes, and what its copy must wait for: the
 * bookkeeping of staging.c, free of any backend so that a CPU test drives it alone
 * (tests/data/test_staging_slots.py). The emulated GPU is synchronous, so only that test can see
 * a copy overwrite a slot that a step still reads. Plain C, also compiled as C++.
 *
 * The protocol, per batch n (steps run in order on the model's stream, copies in order on
 * the copy stream):
 *   plan = take()          the slot; wait_done: the copy stream must first wait for the
 *                          slot's done event, recorded after the last step that read it
 *                          (step n - 2: step n - 1 used the other slot, so the copy of
 *                          batch n overlaps step n - 1); sync_first: a step that read the
 *                          slot was queued without its done record (cannot happen when
 *                          every take is followed by finish): synchronise both streams
 *   ...copy into the slot on the copy stream, record copied[slot] there; the model's
 *      stream waits for copied[slot], then runs step n...
 *   finish(slot)           after done[slot] was recorded behind step n's last reader
 *   reset()                after both streams were synchronised (a larger batch moved the
 *                          slots): nothing is in flight any more */
#ifndef MANAKA_STAGING_SLOTS_H
#define MANAKA_STAGING_SLOTS_H

#define MK_STAGING_SLOTS 2

typedef struct {
    int next;                     /* the slot the next batch takes */
    int busy[MK_STAGING_SLOTS];     /* taken, and done not yet recorded behind its step */
    int recorded[MK_STAGING_SLOTS]; /* done[slot] marks the end of the last step reading it */
} mk_staging_slots;

typedef struct {
    int slot;
    int wait_done;  /* the copy must wait for done[slot] */
    int sync_first; /* synchronise both streams (then nothing needs waiting for) */
} mk_staging_slot_plan;

static inline void mk_staging_slots_reset(mk_staging_slots *s) {
    for (int k = 0; k < MK_STAGING_SLOTS; k++) s->busy[k] = s->recorded[k] = 0;
}

static inline mk_staging_slot_plan mk_staging_slots_take(mk_staging_slots *s) {
    mk_staging_slot_plan p;
    p.slot = s->next;
    p.sync_first = s->busy[p.slot];
    p.wait_done = !p.sync_first && s->recorded[p.slot];
    s->busy[p.slot] = 1;
    s->recorded[p.slot] = 0; /* done[slot] will be recorded again behind this step */
    s->next = (p.slot + 1) % MK_STAGING_SLOTS;
    return p;
}

/* The slot the next take() returns (the binding keeps a device batch's arrays alive per
 * slot and releases them once that slot's last step is done). */
static inline int mk_staging_slots_peek(const mk_staging_slots *s) { return s->next; }

static inline void mk_staging_slots_finish(mk_staging_slots *s, int slot) {
    s->busy[slot] = 0;
    s->recorded[slot] = 1;
}
#endif
