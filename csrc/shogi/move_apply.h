/* Playing a move: the position after a legal move, and whether a side is in check.
 *
 * A game driver (self-play, a USI engine) needs the next position after each move; the
 * move generator (position.c) never makes moves, it only lists them. */
#ifndef MANAKA_SHOGI_MOVE_APPLY_H
#define MANAKA_SHOGI_MOVE_APPLY_H

#include "position.h"

/* Why a move is refused, beyond mk_shogi_validate's codes for the position itself. */
enum { MK_SHOGI_MOVE_NOT_LEGAL = 200 };

/* *out = the position after `move` (cshogi's move16, position.h) by the side to move:
 * the piece moves (promoted when the move says so) or is dropped from the hand, a captured
 * piece goes to the mover's hand unpromoted, and the other side is to move. `pos` must be
 * valid (mk_shogi_validate) and `move` one of its legal moves, else the code says why
 * (MK_SHOGI_MOVE_NOT_LEGAL for the move) and *out is left alone. out may be pos. */
int mk_shogi_apply_move(const mk_shogi_pos *pos, uint16_t move, mk_shogi_pos *out);

/* 1 when the side to move's king is attacked, else 0 (the position must be valid). */
int mk_shogi_in_check(const mk_shogi_pos *pos);

#endif
