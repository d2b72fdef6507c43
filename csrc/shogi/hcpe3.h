/* dlshogi's hcpe3 self-play files (docs/shogi.md): games of variable length, little-endian.
 *
 * A game is a 36-byte header, HuffmanCodedPosAndEval3: the starting position's 32-byte
 * Huffman code (HCPE's), uint16 moveNum, uint8 result (bits 0-1: 0 draw, 1 Black won,
 * 2 White won; the higher bits flag how the game ended), uint8 opponent; then moveNum
 * positions, each a 6-byte MoveInfo (uint16 selectedMove16, int16 eval for the side to
 * move, uint16 candidateNum) followed by candidateNum 4-byte MoveVisits (uint16 move16,
 * uint16 visitNum). The next position is the one after the selected move.
 *
 * A position with candidates is a training record; one without (candidateNum 0: a move
 * not searched, such as an opening or an opponent's move) is only played through, as
 * dlshogi's own reader does. Moves are cshogi's move16 (position.h). */
#ifndef MANAKA_SHOGI_HCPE3_H
#define MANAKA_SHOGI_HCPE3_H

#include <stdint.h>

#include "records.h"

#define MK_HCPE3_HEADER_BYTES 36
#define MK_HCPE3_INFO_BYTES 6
#define MK_HCPE3_VISIT_BYTES 4

/* Faults beyond records.h's and move_apply.h's codes. */
enum { MK_HCPE3_CUT_SHORT = 300, MK_HCPE3_CANDIDATE_NOT_LEGAL, MK_HCPE3_NO_VISITS,
       MK_HCPE3_SELECTED_NOT_LEGAL };

/* One file's index. The scan walks every game and, for each training record, writes an
 * HCPE record (38 bytes: the position's Huffman code, the eval, the selected move, the
 * game's result) into hcpe[r], the byte offset of its MoveInfo into info[r], and its game
 * and ply into game[r], ply[r] (each array with room for `capacity` records, at least
 * mk_hcpe3_count's). Checks on the way: each game is whole; its start is a valid
 * position and its result in range; each selected move is legal; each candidate is a
 * legal move, and the visits sum above 0.
 *
 * skip = 0: stops at the first fault; skip = 1: leaves out the records a fault spoils
 * (a bad start or result: the game's; an illegal selected move: the game's from there on;
 * a bad candidate list: that record; a game cut short at the end of the file: its records
 * so far) and counts them in *skipped.
 *
 * Returns the number of records written (or counted), or -1 on a fault (skip = 0) with
 * *fault the code, *fault_record the record's number among the file's positions with
 * candidates (counting from 0 over the whole file), *fault_game and *fault_ply where. */
typedef struct {
    int code;
    int64_t record, game, ply;
} mk_hcpe3_fault;

int64_t mk_hcpe3_scan(const uint8_t *data, int64_t size, int skip, int64_t capacity, uint8_t *hcpe,
                      int64_t *info, int64_t *game, int32_t *ply, int64_t *skipped, mk_hcpe3_fault *fault);

/* The number of positions with candidates in the file's games (those cut short included):
 * the capacity mk_hcpe3_scan needs. */
int64_t mk_hcpe3_count(const uint8_t *data, int64_t size);

/* The soft policy target of one record: its MoveInfo at `info` (with `available` bytes
 * from there), the side to move, and its legal labels [n] (mk_shogi_row's, in any encoding:
 * their dlshogi labels ascend): policy[l] = the visits of the candidate whose label is labels[l] over all the candidates' visits,
 * 0 for a legal move with none. Returns MK_SHOGI_OK or the fault's code. */
int mk_hcpe3_policy(const uint8_t *info, int64_t available, int side, const int32_t *labels, int n,
                    float *policy);

/* mk_hcpe3_policy over n rows: row i's MoveInfo at data[info[i]:] (data: the file's `size`
 * bytes), its side to move side[i] & 1, its legal labels labels[offsets[i] .. offsets[i + 1])
 * and its policy at the same place of policy [total]; status[i] its code (a row with a
 * fault gets zeros). Checks every row before writing anything: returns -1 when offsets do
 * not run from 0 to `total`, else the first row whose offsets decrease, hold more than
 * MK_SHOGI_MAX_MOVES labels or whose info is outside data, else n. */
int64_t mk_hcpe3_policy_rows(const uint8_t *data, int64_t size, const int64_t *info,
                             const uint8_t *side, const int32_t *labels, const int64_t *offsets,
                             int64_t n, int64_t total, float *policy, int32_t *status);

const char *mk_hcpe3_reason(int code);

#endif
