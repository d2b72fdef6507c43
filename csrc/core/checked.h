/* Checked arithmetic for sizes computed from user input: a dimension, a
 * batch size or a count multiplied into an element or byte count must fail cleanly, never
 * wrap into a small allocation that the loops then overrun. C files only (the GCC / Clang
 * builtins; nvcc's host compiler has them too, but nothing under csrc/cuda needs them). */
#ifndef MANAKA_CHECKED_H
#define MANAKA_CHECKED_H

#include <stddef.h>
#include <stdint.h>

/* The most elements any one size may count: 2^56 (2.9e17 bytes as floats, far beyond any
 * machine), which leaves room for the byte counts and the 2-4 buffers of a tensor
 * (parameters, gradients, two moments) to be summed without a further check. */
#define MK_MAX_ELEMENTS ((int64_t)1 << 56)

/* *out = a * b, or 1 (and *out untouched) when a or b is negative or the product is above
 * MK_MAX_ELEMENTS. */
static inline int mk_mul_too_big(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > MK_MAX_ELEMENTS) return 1;
    *out = r;
    return 0;
}

/* *out = a + b under the same rule. */
static inline int mk_add_too_big(int64_t a, int64_t b, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > MK_MAX_ELEMENTS) return 1;
    *out = r;
    return 0;
}

#endif
