/* The relative part of the move-pair table (core/backend_ops.def, move_pair_relative_sums),
 * host and device: its index ridx(v, c) splits into a token's part plus a class's part,
 *   ridx(v, c) = mk_relative_token(v) + mk_relative_class(c)
 * so a kernel computes each part once per token and once per legal move and adds them in
 * its inner loop. With S = W H: token v < K S is kind v / S on square v % S, class c is
 * kind c / S on square c % S, square s is (s / H, s % H); the table is
 * [K (2W - 1) (2H - 1), C / S]. A token's part is -1 when it is no board token (v < 0 or
 * v >= K S): it adds nothing. Both parts stay below 2^31 whenever the table does (the
 * model refuses larger ones). */
#ifndef MANAKA_MOVE_PAIR_BOARD_H
#define MANAKA_MOVE_PAIR_BOARD_H

#include <stdint.h>

#include "hash.h" /* MK_HOST_DEVICE */

MK_HOST_DEVICE static inline int64_t mk_relative_token(int64_t v, int64_t C, int64_t W, int64_t H,
                                                       int64_t K) {
    const int64_t S = W * H;
    if (v < 0 || v >= K * S) return -1;
    const int64_t s = v % S;
    return ((v / S * (2 * W - 1) + s / H + W - 1) * (2 * H - 1) + s % H + H - 1) * (C / S);
}

MK_HOST_DEVICE static inline int64_t mk_relative_class(int64_t c, int64_t C, int64_t W, int64_t H) {
    const int64_t S = W * H, s = c % S;
    return c / S - (s / H * (2 * H - 1) + s % H) * (C / S);
}

#endif
