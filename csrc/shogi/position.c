/* Legal move generation, validation, labels and tokens: see position.h.
 *
 * Bitboards: a set of squares is an unsigned __int128 whose bit s is square s (81 used
 * bits; a file's nine squares are nine consecutive bits). Attacks come from tables built
 * once (pthread_once, so any producer thread may be first):
 * - step[color][kind][s]: the squares a pawn, knight, silver, gold (and the four promoted
 *   minor pieces, which move like it) or king of `color` on s attacks;
 * - ray[d][s]: every square from s outwards along direction d to the edge. A slider's
 *   attack along d is the ray cut after its nearest blocker: the nearest occupied square
 *   is the lowest set bit of ray & occupied when d goes towards higher square numbers, the
 *   highest otherwise, and the cut is ray[d][s] ^ ray[d][blocker].
 * Because every step set is symmetric under the half-turn, "which pieces of colour c
 * attack s" reads the tables of the other colour at s (attackers_to).
 *
 * Legality without making moves: the checkers and the pinned pieces are found once from
 * the king (a "sniper" is an enemy slider on one of the king's lines with an empty board;
 * no piece between: it checks; exactly one of ours between: that piece is pinned and may
 * only move between the king and the sniper, capture included). In single check, a board
 * move must capture the checker or land between it and the king, and a drop must land
 * between. King moves: its step squares not attacked by the opponent, the attacks computed
 * with the king lifted off the board so that it cannot step back along a slider's line.
 * Drops: empty squares less the last rank(s) for pawns, lances and knights, less the files
 * holding one of our unpromoted pawns for pawns; a pawn dropped in front of the enemy king
 * is refused when the king has no escape and no other piece can take it without exposing
 * its king (pawn_drop_mates). Promotions: both moves where the piece may promote, except
 * that a pawn or lance reaching the last rank and a knight the last two must promote.
 *
 * Labels: the dlshogi label of a board move depends only on (side, from, to): a table
 * (label_base) holds direction * 81 + destination seen by the mover, promotion adds 810. */
#include "position.h"

#include <pthread.h>
#include <string.h>

typedef mk_shogi_bb bb;

/* The 8 directions as (file, rank) steps, Black's view: 0 up (towards rank a), 1 up-left
 * (file + 1), 2 up-right, 3 left, 4 right, 5 down, 6 down-left, 7 down-right. Directions
 * 1, 3, 5, 6 go towards higher square numbers. */
static const int dir_file[8] = {0, 1, -1, 1, -1, 0, 1, -1};
static const int dir_rank[8] = {-1, -1, -1, 0, 0, 1, 1, 1};

enum { ST_PAWN, ST_KNIGHT, ST_SILVER, ST_GOLD, ST_KING, ST_KINDS };

static bb square_bb[MK_SHOGI_SQUARES];
static bb ray[8][MK_SHOGI_SQUARES];
static bb step[2][ST_KINDS][MK_SHOGI_SQUARES];
static bb rook_empty[MK_SHOGI_SQUARES], bishop_empty[MK_SHOGI_SQUARES];
static bb file_bb[9];
static bb file_low8, file_high; /* ranks a..h of every file; rank i of every file */
static bb zone[2];      /* a colour's promotion zone: the three far ranks */
static bb last_rank[2]; /* the far rank: no pawn or lance may stand there */
static bb last_two[2];  /* the two far ranks: no knight */
static int8_t line_dir[MK_SHOGI_SQUARES][MK_SHOGI_SQUARES]; /* direction a -> b, -1 off line */
static uint8_t file_of[MK_SHOGI_SQUARES];
/* dlshogi direction * 81 + destination, seen by the side that moves from -> to */
static int16_t label_base[2][MK_SHOGI_SQUARES][MK_SHOGI_SQUARES];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static const int max_count[8] = {18, 4, 4, 4, 2, 2, 4, 2}; /* per unpromoted kind (kings: both) */

/* dlshogi's direction of a move from -> to, both seen by the mover (mk_shogi_label). */
static int label_direction(int from, int to) {
    int dir_x = from / 9 - to / 9, dir_y = to % 9 - from % 9;
    if (dir_y < 0 && dir_x == 0) return 0;
    if (dir_y == -2 && dir_x == -1) return 8;
    if (dir_y == -2 && dir_x == 1) return 9;
    if (dir_y < 0 && dir_x < 0) return 1;
    if (dir_y < 0 && dir_x > 0) return 2;
    if (dir_y == 0 && dir_x < 0) return 3;
    if (dir_y == 0 && dir_x > 0) return 4;
    if (dir_y > 0 && dir_x == 0) return 5;
    if (dir_y > 0 && dir_x < 0) return 6;
    return 7;
}

static bb at(int file, int rank) {
    return file >= 0 && file < 9 && rank >= 0 && rank < 9 ? square_bb[9 * file + rank] : 0;
}

static void init_tables(void) {
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        square_bb[s] = (bb)1 << s;
        file_of[s] = (uint8_t)(s / 9);
    }
    memset(line_dir, -1, sizeof line_dir);
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        int f = s / 9, r = s % 9;
        for (int d = 0; d < 8; d++) {
            bb x = 0;
            for (int i = 1; i < 9; i++) {
                bb b = at(f + i * dir_file[d], r + i * dir_rank[d]);
                if (!b) break;
                x |= b;
                line_dir[s][9 * (f + i * dir_file[d]) + r + i * dir_rank[d]] = (int8_t)d;
            }
            ray[d][s] = x;
        }
        rook_empty[s] = ray[0][s] | ray[3][s] | ray[4][s] | ray[5][s];
        bishop_empty[s] = ray[1][s] | ray[2][s] | ray[6][s] | ray[7][s];
        for (int c = 0; c < 2; c++) {
            int up = c ? 1 : -1, fu = c ? -1 : 1; /* forward rank step; "left" file step */
            step[c][ST_PAWN][s] = at(f, r + up);
            step[c][ST_KNIGHT][s] = at(f + 1, r + 2 * up) | at(f - 1, r + 2 * up);
            step[c][ST_SILVER][s] = at(f, r + up) | at(f + fu, r + up) | at(f - fu, r + up) |
                                    at(f + fu, r - up) | at(f - fu, r - up);
            step[c][ST_GOLD][s] = at(f, r + up) | at(f + fu, r + up) | at(f - fu, r + up) |
                                  at(f + 1, r) | at(f - 1, r) | at(f, r - up);
            bb k = 0;
            for (int d = 0; d < 8; d++) k |= at(f + dir_file[d], r + dir_rank[d]);
            step[c][ST_KING][s] = k;
        }
        for (int t = 0; t < MK_SHOGI_SQUARES; t++) {
            label_base[0][s][t] = (int16_t)(label_direction(s, t) * 81 + t);
            label_base[1][s][t] = (int16_t)(label_direction(80 - s, 80 - t) * 81 + 80 - t);
        }
    }
    for (int f = 0; f < 9; f++) {
        file_bb[f] = (bb)0x1FF << (9 * f);
        file_low8 |= (bb)0xFF << (9 * f);
        file_high |= (bb)0x100 << (9 * f);
    }
    for (int f = 0; f < 9; f++)
        for (int r = 0; r < 9; r++) {
            if (r <= 2) zone[0] |= at(f, r);
            if (r >= 6) zone[1] |= at(f, r);
            if (r == 0) last_rank[0] |= at(f, r);
            if (r == 8) last_rank[1] |= at(f, r);
            if (r <= 1) last_two[0] |= at(f, r);
            if (r >= 7) last_two[1] |= at(f, r);
        }
}

void mk_shogi_init(void) { pthread_once(&tables_once, init_tables); }
#define init mk_shogi_init

static inline int lsb(bb b) {
    uint64_t lo = (uint64_t)b;
    return lo ? __builtin_ctzll(lo) : 64 + __builtin_ctzll((uint64_t)(b >> 64));
}

static inline int msb(bb b) {
    uint64_t hi = (uint64_t)(b >> 64);
    return hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll((uint64_t)b);
}

/* Every square of `set`, in ascending order, as `t` in `body`. */
#define FOR_SQUARES(set, t, body)                                                                  \
    do {                                                                                           \
        bb set_ = (set);                                                                           \
        uint64_t lo_ = (uint64_t)set_, hi_ = (uint64_t)(set_ >> 64);                               \
        while (lo_) {                                                                              \
            int t = __builtin_ctzll(lo_);                                                          \
            lo_ &= lo_ - 1;                                                                        \
            body                                                                                   \
        }                                                                                          \
        while (hi_) {                                                                              \
            int t = 64 + __builtin_ctzll(hi_);                                                     \
            hi_ &= hi_ - 1;                                                                        \
            body                                                                                   \
        }                                                                                          \
    } while (0)

/* A slider's attack from s along d (a constant at every call), without branches. Towards
 * higher squares the attack is the ray up to the lowest blocker: the ray masked below the
 * blocker's bit doubled (no blocker: the whole ray). Towards lower squares it is the ray
 * less the ray beyond the highest blocker; with no blocker that is square 0's ray, empty
 * in each of those directions, as `| 1` makes it. */
static inline bb slide(int d, int s, bb occ) {
    bb r = ray[d][s], b = r & occ;
    if (d == 1 || d == 3 || d == 5 || d == 6) return r & (((b & -b) << 1) - 1);
    uint64_t hi = (uint64_t)(b >> 64), lo = (uint64_t)b | 1;
    int x = hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll(lo);
    return r ^ ray[d][x];
}

static inline bb rook_attack(int s, bb occ) {
    return slide(0, s, occ) | slide(3, s, occ) | slide(4, s, occ) | slide(5, s, occ);
}
static inline bb bishop_attack(int s, bb occ) {
    return slide(1, s, occ) | slide(2, s, occ) | slide(6, s, occ) | slide(7, s, occ);
}
static inline bb lance_attack(int color, int s, bb occ) {
    return color ? slide(5, s, occ) : slide(0, s, occ);
}

typedef mk_shogi_boards boards;

#define PIECES(B, c, k) ((B)->piece[1 + (k) + 16 * (c)])
#define GOLDS(B, c)                                                                                \
    (PIECES(B, c, MK_GOLD) | PIECES(B, c, MK_PRO_PAWN) | PIECES(B, c, MK_PRO_LANCE) |                 \
     PIECES(B, c, MK_PRO_KNIGHT) | PIECES(B, c, MK_PRO_SILVER))
#define BISHOPS(B, c) (PIECES(B, c, MK_BISHOP) | PIECES(B, c, MK_HORSE))
#define ROOKS(B, c) (PIECES(B, c, MK_ROOK) | PIECES(B, c, MK_DRAGON))
#define KINGLIKE(B, c) (PIECES(B, c, MK_KING) | PIECES(B, c, MK_HORSE) | PIECES(B, c, MK_DRAGON))

/* The sliders of colour c that attack s through occupancy occ: those on one of s's
 * lines (with an empty board) with nothing between. */
static inline bb slider_attackers(const boards *B, int s, int c, bb occ) {
    bb snipers = (ray[c ? 0 : 5][s] & PIECES(B, c, MK_LANCE)) | (rook_empty[s] & ROOKS(B, c)) |
                 (bishop_empty[s] & BISHOPS(B, c)), a = 0;
    FOR_SQUARES(snipers, x, {
        int d = line_dir[s][x];
        if (!((ray[d][s] ^ ray[d][x] ^ square_bb[x]) & occ)) a |= square_bb[x];
    });
    return a;
}

/* The pieces of colour c that attack s through occupancy occ. */
static inline bb attackers_to(const boards *B, int s, int c, bb occ) {
    int o = 1 - c;
    return (step[o][ST_PAWN][s] & PIECES(B, c, MK_PAWN)) | (step[o][ST_KNIGHT][s] & PIECES(B, c, MK_KNIGHT)) |
           (step[o][ST_SILVER][s] & PIECES(B, c, MK_SILVER)) | (step[o][ST_GOLD][s] & GOLDS(B, c)) |
           (step[o][ST_KING][s] & KINGLIKE(B, c)) | slider_attackers(B, s, c, occ);
}

void mk_shogi_boards_finish(boards *B) {
    bb o[2] = {0, 0};
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 14; k++) o[c] |= PIECES(B, c, k);
    B->occ[0] = o[0];
    B->occ[1] = o[1];
    B->all = o[0] | o[1];
    for (int c = 0; c < 2; c++) {
        bb k = PIECES(B, c, MK_KING);
        B->king[c] = k ? lsb(k) : -1;
    }
}

/* The bitboards of a position given as cells. Returns 0, or 1 when a cell is out of range
 * (then the boards leave it out). */
static int make_boards(const mk_shogi_pos *pos, boards *B) {
    memset(B->piece, 0, sizeof B->piece);
    unsigned bad = 0;
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        unsigned p = pos->board[s];
        if (!p) continue;
        unsigned k = (p & 15) - 1;
        if (k >= 14 || p >= 32) {
            bad = 1;
            continue;
        }
        B->piece[p] |= square_bb[s];
    }
    mk_shogi_boards_finish(B);
    return (int)bad;
}

static inline int popcount(bb x) {
    return __builtin_popcountll((uint64_t)x) + __builtin_popcountll((uint64_t)(x >> 64));
}

/* Bit 8 of each file's nine bits set when the file holds any square of x: the low eight
 * bits plus 0xFF carry into bit 8 when they are not all zero, and never past it. */
static inline bb file_heads(bb x) { return (((x & file_low8) + file_low8) | x) & file_high; }

/* The square-by-square checks of the first version, kept for their order: when a position
 * has a fault of these kinds, the code reported is that of its first faulty square. */
static int first_square_fault(const mk_shogi_pos *pos) {
    int pawns[2][9] = {{0}};
    for (int file = 0, s = 0; file < 9; file++)
        for (int r = 0; r < 9; r++, s++) {
            uint8_t p = pos->board[s];
            if (!p) continue;
            int k = MK_SHOGI_KIND(p), c = MK_SHOGI_COLOR(p);
            if (k < 0 || k > 13 || c > 1) return MK_SHOGI_BAD_PIECE;
            int rank = c ? 8 - r : r;
            if (((k == MK_PAWN || k == MK_LANCE) && rank == 0) || (k == MK_KNIGHT && rank <= 1))
                return MK_SHOGI_DEAD_PIECE;
            if (k == MK_PAWN && pawns[c][file]++) return MK_SHOGI_TWO_PAWNS;
        }
    return MK_SHOGI_OK;
}

/* mk_shogi_validate on boards made by make_boards (its return value in `bad`). */
static int validate_boards(const mk_shogi_pos *pos, const boards *B, int bad) {
    if (pos->side > 1) return MK_SHOGI_BAD_PIECE;
    int fault = bad;
    for (int c = 0; c < 2 && !fault; c++) {
        bb pawns = PIECES(B, c, MK_PAWN);
        if (((pawns | PIECES(B, c, MK_LANCE)) & last_rank[c]) || (PIECES(B, c, MK_KNIGHT) & last_two[c])) fault = 1;
        if (popcount(pawns) != popcount(file_heads(pawns))) fault = 1; /* two on a file */
    }
    if (fault) {
        int code = first_square_fault(pos);
        if (code != MK_SHOGI_OK) return code;
    }
    if (!PIECES(B, 0, MK_KING) || !PIECES(B, 1, MK_KING)) return MK_SHOGI_BAD_KINGS;
    for (int c = 0; c < 2; c++) {
        bb k = PIECES(B, c, MK_KING);
        if (k & (k - 1)) return MK_SHOGI_BAD_KINGS;
    }
    int count[8];
    for (int k = 0; k < 8; k++) {
        count[k] = 0;
        for (int c = 0; c < 2; c++) {
            bb x = PIECES(B, c, k);
            if (k < MK_GOLD) x |= PIECES(B, c, k + 8);
            count[k] += popcount(x);
        }
    }
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++) count[h] += pos->hand[c][h];
    for (int k = 0; k < 8; k++)
        if (count[k] > max_count[k]) return MK_SHOGI_TOO_MANY;
    int us = pos->side;
    if (attackers_to(B, B->king[1 - us], us, B->all)) return MK_SHOGI_KING_CAPTURABLE;
    return MK_SHOGI_OK;
}

int mk_shogi_validate(const mk_shogi_pos *pos) {
    init();
    boards B;
    int bad = make_boards(pos, &B);
    return validate_boards(pos, &B, bad);
}

int mk_shogi_validate_boards(const mk_shogi_pos *pos, const boards *B) { return validate_boards(pos, B, 0); }

/* Would a pawn of `us` dropped on t (the square in front of the enemy king) mate? */
static int pawn_drop_mates(const boards *B, int us, int t) {
    int them = 1 - us, k = B->king[them];
    bb occ = B->all | square_bb[t];
    /* The pawn taken by a piece other than the king that is not pinned: after the capture
     * the only new attack on the king can come from a slider the piece was blocking. */
    bb takers = attackers_to(B, t, them, occ) & ~square_bb[k];
    FOR_SQUARES(takers, x, {
        if (!slider_attackers(B, k, us, occ ^ square_bb[x])) return 0;
    });
    /* A king step to a square we do not attack (the pawn's square included: the pawn
     * attacks only the king's square), with the king lifted off the board. */
    bb lifted = occ ^ square_bb[k];
    FOR_SQUARES(step[them][ST_KING][k] & ~B->occ[them], y, {
        if (!attackers_to(B, y, us, lifted)) return 0;
    });
    return 1;
}

/* Where the moves go: a list of moves and their labels (`bits` NULL), or a bitset of the
 * labels (bit l of bits[] for label l) and whether the move `want` is among them (`found`).
 * Both generators below are this one function, inlined with `bits` a constant, so that
 * neither pays for the other's test. */
typedef struct {
    uint16_t *moves;
    int32_t *labels;
    uint64_t *bits;
    int n;
    int want_from, want_to, want_promote; /* want_from -1: no move to look for */
    int found;
} sink;

static inline void set_label(uint64_t *bits, int l) { bits[l >> 6] |= 1ull << (l & 63); }

static inline __attribute__((always_inline)) void emit_all(sink *out, int bitset, int from, bb to, int promote,
                                                           const int16_t *base) {
    if (bitset) {
        FOR_SQUARES(to, t, set_label(out->bits, base[t] + 810 * promote););
    } else {
        FOR_SQUARES(to, t, {
            out->moves[out->n] = (uint16_t)(t | from << 7 | promote << 14);
            out->labels[out->n] = base[t] + 810 * promote;
            out->n++;
        });
    }
}

/* The moves of the board piece on `from`: `promote` with promotion, `stay` without. */
static inline __attribute__((always_inline)) void emit_piece(sink *out, int bitset, int from, bb promote, bb stay,
                                                             const int16_t *base) {
    if (bitset && from == out->want_from)
        out->found |= ((out->want_promote ? promote : stay) & square_bb[out->want_to]) != 0;
    emit_all(out, bitset, from, promote, 1, base);
    emit_all(out, bitset, from, stay, 0, base);
}

/* The moves of a piece of kind k (a constant) on `from` to the squares of `a`: with
 * promotion where the move starts or ends in the zone (pawns, lances, knights, silvers,
 * bishops, rooks), without unless a pawn or lance reaches the last rank or a knight the
 * last two. */
static inline __attribute__((always_inline)) void emit_kind(sink *out, int bitset, int k, int us, int from, bb a,
                                                            const int16_t *base) {
    if (k > MK_ROOK) {
        emit_piece(out, bitset, from, 0, a, base);
        return;
    }
    bb z = zone[us];
    bb promote = (z & square_bb[from]) ? a : a & z, stay = a;
    if (k == MK_PAWN || k == MK_LANCE) stay &= ~last_rank[us];
    else if (k == MK_KNIGHT) stay &= ~last_two[us];
    emit_piece(out, bitset, from, promote, stay, base);
}

static inline __attribute__((always_inline)) int generate(const mk_shogi_pos *pos, const boards *B, sink *out,
                                                          int bitset) {
    int us = pos->side, them = 1 - us, k0 = B->king[us];
    bb occ = B->all, ours = B->occ[us];
    const int16_t(*base)[MK_SHOGI_SQUARES] = label_base[us];

    /* Checkers: the stepping pieces next to (or a knight's jump from) the king, and the
     * snipers with nothing between; pins: snipers with exactly one of ours between. */
    bb checkers = (step[us][ST_PAWN][k0] & PIECES(B, them, MK_PAWN)) |
                  (step[us][ST_KNIGHT][k0] & PIECES(B, them, MK_KNIGHT)) |
                  (step[us][ST_SILVER][k0] & PIECES(B, them, MK_SILVER)) | (step[us][ST_GOLD][k0] & GOLDS(B, them)) |
                  (step[us][ST_KING][k0] & KINGLIKE(B, them));
    bb block = 0, pinned = 0;
    int pin_square[8];
    bb pin_line[8];
    int pins = 0;
    bb snipers = (ray[us ? 5 : 0][k0] & PIECES(B, them, MK_LANCE)) | (rook_empty[k0] & ROOKS(B, them)) |
                 (bishop_empty[k0] & BISHOPS(B, them));
    FOR_SQUARES(snipers, x, {
        int d = line_dir[k0][x];
        bb between = ray[d][k0] ^ ray[d][x] ^ square_bb[x];
        bb inside = between & occ;
        if (!inside) {
            checkers |= square_bb[x];
            block |= between;
        } else if (!(inside & (inside - 1)) && (inside & ours)) {
            pinned |= inside;
            pin_square[pins] = lsb(inside);
            pin_line[pins++] = between | square_bb[x];
        }
    });

    /* King moves: to the squares the opponent does not attack with our king lifted (so
     * that it cannot step back along a slider's line), each tested on its own: a king
     * has few free squares, fewer than the opponent's pieces whose attacks a map of every
     * attacked square would need. */
    bb king_to = 0, lifted = occ ^ square_bb[k0];
    FOR_SQUARES(step[us][ST_KING][k0] & ~ours, t, {
        if (!attackers_to(B, t, them, lifted)) king_to |= square_bb[t];
    });
    emit_piece(out, bitset, k0, 0, king_to, base[k0]);
    if (checkers & (checkers - 1)) return out->n; /* double check: only the king moves */

    bb target = ~ours, drop_to = ~occ & (((bb)1 << MK_SHOGI_SQUARES) - 1);
    if (checkers) {
        target = checkers | block;
        drop_to = block;
    }
    bb z = zone[us];

    /* The other pieces, kind by kind. Pawns that are not pinned all at once: their
     * destinations are the pawn set shifted one rank (a pawn never stands on its last
     * rank), each from the square behind. */
    bb pawns = PIECES(B, us, MK_PAWN);
    {
        bb free = pawns & ~pinned, to = (us ? free << 1 : free >> 1) & target;
        bb promote = to & z, stay = to & ~last_rank[us];
        int back = us ? -1 : 1;
        if (bitset) {
            if (out->want_from == out->want_to + back)
                out->found |= ((out->want_promote ? promote : stay) & square_bb[out->want_to]) != 0;
            FOR_SQUARES(promote, t, set_label(out->bits, 810 + (us ? 80 - t : t)););
            FOR_SQUARES(stay, t, set_label(out->bits, us ? 80 - t : t););
        } else {
            FOR_SQUARES(promote, t, {
                out->moves[out->n] = (uint16_t)(t | (t + back) << 7 | 1 << 14);
                out->labels[out->n++] = 810 + (us ? 80 - t : t);
            });
            FOR_SQUARES(stay, t, {
                out->moves[out->n] = (uint16_t)(t | (t + back) << 7);
                out->labels[out->n++] = us ? 80 - t : t;
            });
        }
    }
#define PIECES_OF(set, K, ATTACK)                                                                  \
    FOR_SQUARES(set, f, {                                                                          \
        bb a = (ATTACK)&target;                                                                    \
        if (pinned & square_bb[f])                                                                 \
            for (int i = 0; i < pins; i++)                                                         \
                if (pin_square[i] == f) a &= pin_line[i];                                          \
        emit_kind(out, bitset, K, us, f, a, base[f]);                                              \
    })
    PIECES_OF(pawns & pinned, MK_PAWN, step[us][ST_PAWN][f]);
    PIECES_OF(PIECES(B, us, MK_LANCE), MK_LANCE, lance_attack(us, f, occ));
    PIECES_OF(PIECES(B, us, MK_KNIGHT), MK_KNIGHT, step[us][ST_KNIGHT][f]);
    PIECES_OF(PIECES(B, us, MK_SILVER), MK_SILVER, step[us][ST_SILVER][f]);
    PIECES_OF(GOLDS(B, us), MK_GOLD, step[us][ST_GOLD][f]);
    PIECES_OF(PIECES(B, us, MK_BISHOP), MK_BISHOP, bishop_attack(f, occ));
    PIECES_OF(PIECES(B, us, MK_ROOK), MK_ROOK, rook_attack(f, occ));
    PIECES_OF(PIECES(B, us, MK_HORSE), MK_HORSE, bishop_attack(f, occ) | step[us][ST_KING][f]);
    PIECES_OF(PIECES(B, us, MK_DRAGON), MK_DRAGON, rook_attack(f, occ) | step[us][ST_KING][f]);
#undef PIECES_OF

    /* Drops. */
    const uint8_t *hand = pos->hand[us];
    if (!drop_to) return out->n;
    for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++) {
        if (!hand[h]) continue;
        bb to = drop_to;
        if (h == MK_PAWN || h == MK_LANCE) to &= ~last_rank[us];
        else if (h == MK_KNIGHT) to &= ~last_two[us];
        if (h == MK_PAWN) {
            FOR_SQUARES(PIECES(B, us, MK_PAWN), s, to &= ~file_bb[file_of[s]];);
            bb mate_square = step[them][ST_PAWN][B->king[them]] & to;
            if (mate_square && pawn_drop_mates(B, us, lsb(mate_square))) to ^= mate_square;
        }
        int from = 81 + h, label = (20 + h) * 81;
        if (bitset) {
            if (from == out->want_from) out->found |= !out->want_promote && (to & square_bb[out->want_to]);
            FOR_SQUARES(to, t, set_label(out->bits, label + (us ? 80 - t : t)););
        } else {
            FOR_SQUARES(to, t, {
                out->moves[out->n] = (uint16_t)(t | from << 7);
                out->labels[out->n] = label + (us ? 80 - t : t);
                out->n++;
            });
        }
    }
    return out->n;
}

int mk_shogi_legal_moves_labels(const mk_shogi_pos *pos, uint16_t *moves, int32_t *labels) {
    init();
    boards B;
    make_boards(pos, &B);
    sink out = {moves, labels, NULL, 0, -1, 0, 0, 0};
    return generate(pos, &B, &out, 0);
}

int mk_shogi_legal_moves(const mk_shogi_pos *pos, uint16_t *moves) {
    int32_t labels[MK_SHOGI_MAX_MOVES];
    return mk_shogi_legal_moves_labels(pos, moves, labels);
}

#define LABEL_WORDS ((MK_SHOGI_NUM_LABELS + 63) / 64)

/* The sorted labels are the set bits of a 2187-bit set read in order: no sort. */
int mk_shogi_legal_labels_boards(const mk_shogi_pos *pos, const boards *B, uint16_t move, int32_t *labels,
                                 int32_t *target) {
    uint64_t bits[LABEL_WORDS] = {0};
    int to = move & 127, from = move >> 7 & 127, promote = move >> 14 & 1;
    /* a move with bit 15 set, or off the board, is never generated */
    int wanted = !(move >> 15) && to < MK_SHOGI_SQUARES && from < MK_SHOGI_SQUARES + MK_SHOGI_HAND_KINDS;
    sink out = {NULL, NULL, bits, 0, wanted ? from : -1, wanted ? to : 0, promote, 0};
    generate(pos, B, &out, 1);
    int m = 0;
    for (int w = 0; w < LABEL_WORDS; w++)
        for (uint64_t x = bits[w]; x; x &= x - 1) labels[m++] = w * 64 + __builtin_ctzll(x);
    /* the played move's index: a binary search of the sorted labels */
    *target = -1;
    if (out.found) {
        int played = mk_shogi_label(move, pos->side), lo = 0, hi = m - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (labels[mid] < played) lo = mid + 1;
            else hi = mid;
        }
        *target = lo;
    }
    return m;
}

int mk_shogi_legal_labels(const mk_shogi_pos *pos, uint16_t move, int32_t *labels, int32_t *target) {
    init();
    boards B;
    make_boards(pos, &B);
    return mk_shogi_legal_labels_boards(pos, &B, move, labels, target);
}

const char *mk_shogi_reason(int code) {
    switch (code) {
    case MK_SHOGI_OK: return "valid";
    case MK_SHOGI_BAD_PIECE: return "a cell or the side to move is out of range";
    case MK_SHOGI_BAD_KINGS: return "each side needs exactly one king";
    case MK_SHOGI_TOO_MANY: return "more pieces of a kind than a set holds";
    case MK_SHOGI_DEAD_PIECE: return "a pawn, lance or knight that can never move";
    case MK_SHOGI_TWO_PAWNS: return "two unpromoted pawns of one side on a file";
    case MK_SHOGI_KING_CAPTURABLE: return "the side not to move is in check";
    default: return "unknown";
    }
}

int mk_shogi_label(uint16_t move, int side) {
    int to = move & 127, from = move >> 7 & 127, promote = move >> 14 & 1;
    if (side) to = 80 - to;
    if (from >= 81) return (20 + from - 81) * 81 + to;
    if (side) from = 80 - from;
    return (label_direction(from, to) + 10 * promote) * 81 + to;
}

/* Hand kinds in token order P L N S G B R (internal hand order is P L N S B R G). */
static const int token_hand_kind[7] = {MK_PAWN, MK_LANCE, MK_KNIGHT, MK_SILVER, MK_GOLD,
                                       MK_BISHOP, MK_ROOK};
static const int token_hand_offset[8] = {0, 18, 22, 26, 30, 34, 36, 38};

/* (c * 14 + kind) * 81 of a cell value seen by each owner (c = 0 for the owner's pieces);
 * 0 for values that are not pieces (never read: the boards hold only pieces). */
static int16_t token_base[2][32];
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void init_token_base(void) {
    for (int owner = 0; owner < 2; owner++)
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 14; k++)
                token_base[owner][MK_SHOGI_PIECE(c, k)] = (int16_t)(((c != owner) * 14 + k) * 81);
}

void mk_shogi_tokens_boards(const mk_shogi_pos *pos, const boards *B, int32_t *tokens) {
    pthread_once(&token_once, init_token_base);
    /* One pass over the occupied squares in ascending order: Black's perspective takes
     * them forwards, White's (rotated, s -> 80 - s) backwards, so that each comes out in
     * its own square order. */
    int side = pos->side, m = popcount(B->all);
    if (m > MK_SHOGI_TOKENS) { /* never after validation (at most the 40 pieces of a set) */
        mk_shogi_tokens(pos, tokens);
        return;
    }
    int32_t *black = tokens + (side ? MK_SHOGI_TOKENS : 0), *white = tokens + (side ? 0 : MK_SHOGI_TOKENS) + m - 1;
    const int16_t *tb = token_base[0], *tw = token_base[1];
    int i = 0;
    FOR_SQUARES(B->all, s, {
        unsigned p = pos->board[s];
        black[i] = tb[p] + s;
        white[-i] = tw[p] + 80 - s;
        i++;
    });
    /* The hands: each colour's tokens relative to its block, written after the board
     * tokens of both perspectives (the owner's hand first). */
    int16_t rel[2][MK_SHOGI_TOKENS];
    int nrel[2] = {0, 0};
    for (int c = 0; c < 2; c++) {
        const uint8_t *hand = pos->hand[c];
        for (int k = 0; k < 7; k++) {
            int have = hand[token_hand_kind[k]];
            if (!have) continue;
            int room = token_hand_offset[k + 1] - token_hand_offset[k];
            if (have > room) have = room;
            for (int j = 0; j < have && nrel[c] < MK_SHOGI_TOKENS; j++) rel[c][nrel[c]++] = (int16_t)(token_hand_offset[k] + j);
        }
    }
    for (int v = 0; v < 2; v++) {
        int owner = v ? 1 - side : side, n = m;
        int32_t *out = tokens + v * MK_SHOGI_TOKENS;
        for (int c = 0; c < 2; c++) {
            const int16_t *r = rel[c ? 1 - owner : owner];
            int have = nrel[c ? 1 - owner : owner], first = 2268 + c * 38;
            if (have > MK_SHOGI_TOKENS - n) have = MK_SHOGI_TOKENS - n;
            for (int j = 0; j < have; j++) out[n++] = first + r[j];
        }
        while (n < MK_SHOGI_TOKENS) out[n++] = -1;
    }
}

/* The first version, kept for any cells (shogi_analyse encodes positions that failed
 * validation too): the producers use mk_shogi_tokens_boards. */
void mk_shogi_tokens(const mk_shogi_pos *pos, int32_t *tokens) {
    uint8_t occupied[MK_SHOGI_SQUARES];
    int m = 0;
    for (int s = 0; s < MK_SHOGI_SQUARES; s++)
        if (pos->board[s]) occupied[m++] = (uint8_t)s;
    for (int v = 0; v < 2; v++) {
        int owner = v ? 1 - pos->side : pos->side, n = 0;
        int32_t *out = tokens + v * MK_SHOGI_TOKENS;
        for (int i = 0; i < m && n < MK_SHOGI_TOKENS; i++) {
            int s = occupied[owner ? m - 1 - i : i];
            uint8_t p = pos->board[s];
            int c = MK_SHOGI_COLOR(p) != owner;
            out[n++] = (c * 14 + MK_SHOGI_KIND(p)) * 81 + (owner ? 80 - s : s);
        }
        for (int c = 0; c < 2; c++) {
            const uint8_t *hand = pos->hand[c ? 1 - owner : owner];
            for (int i = 0; i < 7; i++) {
                int have = hand[token_hand_kind[i]];
                int room = token_hand_offset[i + 1] - token_hand_offset[i];
                for (int j = 0; j < have && j < room && n < MK_SHOGI_TOKENS; j++)
                    out[n++] = 2268 + c * 38 + token_hand_offset[i] + j;
            }
        }
        while (n < MK_SHOGI_TOKENS) out[n++] = -1;
    }
}
