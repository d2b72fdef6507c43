/* Playing a move: see move_apply.h.
 *
 * Legality is the generator's: the move must be in mk_shogi_legal_moves' list, so a move
 * this file plays is exactly a move the producers would accept as a record's move. */
#include "move_apply.h"

#include <string.h>

int mk_shogi_apply_move(const mk_shogi_pos *pos, uint16_t move, mk_shogi_pos *out) {
    int status = mk_shogi_validate(pos);
    if (status != MK_SHOGI_OK) return status;
    uint16_t moves[MK_SHOGI_MAX_MOVES];
    int n = mk_shogi_legal_moves(pos, moves), legal = 0;
    for (int i = 0; i < n && !legal; i++) legal = moves[i] == move;
    if (!legal) return MK_SHOGI_MOVE_NOT_LEGAL;

    mk_shogi_pos next = *pos;
    int side = pos->side, to = move & 127, from = move >> 7 & 127, promote = move >> 14 & 1;
    if (from >= MK_SHOGI_SQUARES) { /* a drop: hand kinds are board kinds 0..6 */
        int kind = from - MK_SHOGI_SQUARES;
        next.hand[side][kind]--;
        next.board[to] = MK_SHOGI_PIECE(side, kind);
    } else {
        uint8_t captured = next.board[to];
        if (captured) {
            int kind = MK_SHOGI_KIND(captured);
            /* promoted kinds are the unpromoted P L N S B R + 8; the hand holds them plain */
            next.hand[side][kind >= MK_PRO_PAWN ? kind - MK_PRO_PAWN : kind]++;
        }
        uint8_t piece = next.board[from];
        next.board[from] = 0;
        next.board[to] = (uint8_t)(promote ? piece + 8 : piece);
    }
    next.side = (uint8_t)(1 - side);
    *out = next;
    return MK_SHOGI_OK;
}

/* The side to move is in check exactly when the same cells with the other side to move
 * fail validation for a capturable king: validation's other checks do not depend on the
 * side to move, and the position is valid. */
int mk_shogi_in_check(const mk_shogi_pos *pos) {
    mk_shogi_pos other = *pos;
    other.side = (uint8_t)(1 - pos->side);
    return mk_shogi_validate(&other) == MK_SHOGI_KING_CAPTURABLE;
}
