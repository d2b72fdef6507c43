/* dlshogi's HCPE and YaneuraOu's PackedSfenValue records (docs/shogi.md).
 *
 * HCPE, 38 bytes: a 32-byte Huffman-coded position (Apery's HuffmanCodedPos), int16 eval
 * (side to move), uint16 best move (cshogi's move16), uint8 game result (0 draw, 1 Black
 * won, 2 White won), one padding byte.
 * PSV, 40 bytes: a 32-byte packed SFEN (YaneuraOu's), int16 score (side to move), uint16
 * move (YaneuraOu's move16: drop flag 1 << 14, promotion 1 << 15, a drop's from = piece
 * type 1..7), uint16 game ply, int8 result for the side to move (1, 0, -1), one padding
 * byte. Both are little-endian. */
#ifndef MANAKA_SHOGI_RECORDS_H
#define MANAKA_SHOGI_RECORDS_H

#include <stddef.h>

#include "position.h"

#define MK_HCPE_BYTES 38
#define MK_PSV_BYTES 40

enum { MK_SHOGI_FORMAT_HCPE = 0, MK_SHOGI_FORMAT_PSV = 1 };

/* Record faults beyond mk_shogi_validate's codes. */
enum { MK_SHOGI_BAD_CODE = 100, MK_SHOGI_BAD_RESULT, MK_SHOGI_ILLEGAL_MOVE, MK_SHOGI_NOT_FULL_SET };

typedef struct {
    mk_shogi_pos pos;
    uint16_t move;  /* cshogi's move16 (position.h) */
    int16_t eval;   /* side to move */
    float result;   /* side to move: 1 win, 0.5 draw, 0 loss */
} mk_shogi_record;

/* Decodes and validates one record; MK_SHOGI_OK or the fault's code. */
int mk_shogi_decode(int format, const uint8_t *record, mk_shogi_record *out);

/* The same as mk_shogi_row's first step: the position into `boards` (position.h), its
 * side to move and hands into out->pos, whose cells are left alone. */
int mk_shogi_decode_boards(int format, const uint8_t *record, mk_shogi_record *out, mk_shogi_boards *boards);

/* One training row: tokens [2, 40], the legal moves' labels in encoding `moves`
 * (MK_SHOGI_MOVES_*, position.h; in ascending dlshogi label) (returns their count, or
 * -code on a fault, the recorded move not legal included), the played move's index and the
 * value (1 - eval_weight) * result + eval_weight * sigmoid(eval / eval_scale) (eval_scale > 0;
 * dlshogi's is 756). With `mirror`,
 * the row of the left-right mirrored record: files 1..9 become 9..1 on the board and in
 * the move (a symmetry of the rules: the same legality, evaluation and result). */
int mk_shogi_row(int format, const uint8_t *record, double eval_weight, double eval_scale, int mirror, int moves,
                 int32_t *tokens, int32_t *labels, int32_t *target, float *value);

/* The 32-byte Huffman code of a valid position (HCPE's first field), bit for bit what
 * cshogi's Board.to_hcp writes: the code has room for exactly the 40 pieces of a set, so a
 * position missing any (a problem position) is refused with MK_SHOGI_NOT_FULL_SET; a
 * position that fails mk_shogi_validate gets its code. Returns MK_SHOGI_OK or the code. */
int mk_shogi_encode_hcp(const mk_shogi_pos *pos, uint8_t *hcp);

const char *mk_shogi_record_reason(int code);

/* ------------------------------------------------------------ many records (record_columns.c)
 * records: n records of `format`, one after another. */

/* Each record decoded (mk_shogi_decode) into row i of the columns board [n, 81], hand
 * [n, 14], side, move, eval, result [n], and its code into status[i]. */
void mk_shogi_decode_all(int format, const uint8_t *records, int64_t n, uint8_t *board,
                         uint8_t *hand, uint8_t *side, uint16_t *move, int16_t *eval,
                         float *result, int32_t *status);

/* Each record as mk_shogi_row's training row: tokens [n, 2, 40] (as int16), target, value
 * [n], status[i] 0 or the fault's code, and the labels of row i at
 * (*labels)[offsets[i] .. offsets[i + 1]) (offsets [n + 1]); *labels is malloc'd (the
 * caller frees it), *count = offsets[n]. A bad record has no labels, tokens -1, target -1
 * and value 0. 0, or -1 when memory ran out (*labels is then NULL). */
int mk_shogi_rows_all(int format, const uint8_t *records, int64_t n, double eval_weight,
                      double eval_scale, int mirror, int moves, int16_t *tokens, int64_t *offsets, int32_t *target,
                      float *value, int32_t *status, int32_t **labels, size_t *count);

#endif
