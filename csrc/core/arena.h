/* Carving arrays of 4-byte items out of one buffer: the model's activations (model.c) and
 * staging's batch slots (staging.c), both sized from the caller's batch, so every product
 * and the running total are checked (checked.h). One layout function per user, called once
 * with base = NULL to measure and once to carve, keeps the two in step. */
#ifndef MANAKA_ARENA_H
#define MANAKA_ARENA_H

#include "checked.h"

/* n 4-byte items rounded up to 64 bytes (16 items): where each array starts. */
static inline int64_t mk_arena_aligned(int64_t n) { return (n + 15) / 16 * 16; }

/* In a function with `char *base` (NULL: only measure), `int64_t used, n` and
 * `int too_big`: points `ptr` at the next rows x cols items and adds them to `used`; once
 * a product or the total is above MK_MAX_ELEMENTS, too_big is set and every later pointer
 * is NULL. */
#define MK_ARENA_TAKE(ptr, type, rows, cols)                                              \
    do {                                                                                  \
        (ptr) = base && !too_big ? (type *)(base + used * 4) : NULL;                      \
        too_big = too_big || mk_mul_too_big((rows), (cols), &n) ||                        \
                  mk_add_too_big(used, mk_arena_aligned(n), &used);                       \
    } while (0)

#endif
