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
 * The generator works in the side to move's frame (position.h: White to move, the board
 * is turned round and the colours swapped), so it only generates Black's moves.
 *
 * Legality without making moves: the checkers and the pinned pieces are found once from
 * the king (a "sniper" is an enemy slider on one of the king's lines with an empty board;
 * no piece between: it checks; exactly one of ours between: that piece is pinned and may
 * only move between the king and the sniper, capture included). In single check, a board
 * move must capture the checker or land between it and the king, and a drop must land
 * between. King moves: its step squares not attacked by the opponent, each tested with the
 * king lifted off the board so that it cannot step back along a slider's line. Unpinned
 * stepping pieces move kind by kind all at once (the kind's set shifted one step along
 * each of its directions), sliders one ray at a time, pinned pieces one by one within
 * their line. Drops: empty squares less the last rank(s) for pawns, lances and knights,
 * less the files holding one of our unpromoted pawns for pawns; a pawn dropped in front of
 * the enemy king is refused when the king has no escape and no other piece can take it
 * without exposing its king (pawn_drop_mates). Promotions: both moves where the piece may
 * promote, except that a pawn or lance reaching the last rank and a knight the last two
 * must promote.
 *
 * Labels: the moves come out as 27 sets of destinations, one per dlshogi direction, so
 * the sorted labels (direction * 81 + destination) are the sets read in order, and the
 * moves themselves are found again from a label (source_square) when a caller wants them.
 */
#include "position.h"

#include <pthread.h>
#include <string.h>

typedef mk_shogi_bb bb;

/* The 8 directions as (file, rank) steps, Black's view: 0 up (towards rank a), 1 up-left
 * (file + 1), 2 up-right, 3 left, 4 right, 5 down, 6 down-left, 7 down-right: dlshogi's
 * label directions 0..7 in the same order, so a move along direction d has label
 * direction d (d + 10 promoting). Directions 1, 3, 5, 6 go towards higher square numbers. */
static const int dir_file[8] = {0, 1, -1, 1, -1, 0, 1, -1};
static const int dir_rank[8] = {-1, -1, -1, 0, 0, 1, 1, 1};

enum { ST_PAWN, ST_KNIGHT, ST_SILVER, ST_GOLD, ST_KING, ST_KINDS };

static bb square_bb[MK_SHOGI_SQUARES];
static bb ray[8][MK_SHOGI_SQUARES];
static bb step[2][ST_KINDS][MK_SHOGI_SQUARES];
static bb rook_empty[MK_SHOGI_SQUARES], bishop_empty[MK_SHOGI_SQUARES];
static bb file_low8, file_high; /* ranks a..h of every file; rank i of every file */
static bb board_bb, not_rank_a, not_rank_i, not_rank_hi; /* the 81 squares; less rank a, i, h and i */
static bb step_one[8][MK_SHOGI_SQUARES];                /* the square next to s along d, if any */
static bb zone[2];      /* a colour's promotion zone: the three far ranks */
static bb last_rank[2]; /* the far rank: no pawn or lance may stand there */
static bb last_two[2];  /* the two far ranks: no knight */
static int8_t line_dir[MK_SHOGI_SQUARES][MK_SHOGI_SQUARES]; /* direction a -> b, -1 off line */
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
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) square_bb[s] = (bb)1 << s;
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
            step_one[d][s] = at(f + dir_file[d], r + dir_rank[d]);
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
    }
    for (int f = 0; f < 9; f++) {
        file_low8 |= (bb)0xFF << (9 * f);
        file_high |= (bb)0x100 << (9 * f);
    }
    board_bb = ((bb)1 << MK_SHOGI_SQUARES) - 1;
    not_rank_a = not_rank_i = not_rank_hi = board_bb;
    for (int f = 0; f < 9; f++) {
        not_rank_a &= ~at(f, 0);
        not_rank_i &= ~at(f, 8);
        not_rank_hi &= ~(at(f, 7) | at(f, 8));
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

/* Every square of `set`, in ascending order, as `t` in the statements that follow (a
 * variadic argument, so that they may hold commas). */
#define FOR_SQUARES(set, t, ...)                                                                       \
    do {                                                                                           \
        bb set_ = (set);                                                                           \
        uint64_t lo_ = (uint64_t)set_, hi_ = (uint64_t)(set_ >> 64);                               \
        while (lo_) {                                                                              \
            int t = __builtin_ctzll(lo_);                                                          \
            lo_ &= lo_ - 1;                                                                        \
            __VA_ARGS__                                                                            \
        }                                                                                          \
        while (hi_) {                                                                              \
            int t = 64 + __builtin_ctzll(hi_);                                                     \
            hi_ &= hi_ - 1;                                                                        \
            __VA_ARGS__                                                                            \
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
/* The kinds that move alike, as unions made once per position (mk_shogi_boards_finish). */
#define GOLDS(B, c) ((B)->golds[c])
#define BISHOPS(B, c) ((B)->bishops[c])
#define ROOKS(B, c) ((B)->rooks[c])
#define KINGLIKE(B, c) ((B)->kinglike[c])

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
    for (int c = 0; c < 2; c++) {
        bb k = PIECES(B, c, MK_KING), h = PIECES(B, c, MK_HORSE), d = PIECES(B, c, MK_DRAGON);
        bb g = PIECES(B, c, MK_GOLD) | PIECES(B, c, MK_PRO_PAWN) | PIECES(B, c, MK_PRO_LANCE) |
               PIECES(B, c, MK_PRO_KNIGHT) | PIECES(B, c, MK_PRO_SILVER);
        bb bishops = PIECES(B, c, MK_BISHOP) | h, rooks = PIECES(B, c, MK_ROOK) | d;
        B->golds[c] = g;
        B->bishops[c] = bishops;
        B->rooks[c] = rooks;
        B->kinglike[c] = k | h | d;
        B->occ[c] = PIECES(B, c, MK_PAWN) | PIECES(B, c, MK_LANCE) | PIECES(B, c, MK_KNIGHT) |
                    PIECES(B, c, MK_SILVER) | g | bishops | rooks | k;
        B->king[c] = k ? lsb(k) : -1;
    }
    B->all = B->occ[0] | B->occ[1];
}

/* The boards of a position given as cells, in the side to move's frame (position.h).
 * Returns 0, or 1 when a cell is out of range (then the boards leave it out). */
static int make_boards(const mk_shogi_pos *pos, boards *B) {
    memset(B->piece, 0, sizeof B->piece);
    memset(B->cell, 0, sizeof B->cell);
    int flip = pos->side == 1;
    unsigned bad = 0;
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        unsigned p = pos->board[s];
        if (!p) continue;
        unsigned k = (p & 15) - 1;
        if (k >= 14 || p >= 32) {
            bad = 1;
            continue;
        }
        int t = flip ? 80 - s : s;
        p ^= (unsigned)flip << 4;
        B->cell[t] = (uint8_t)p;
        B->piece[p] |= square_bb[t];
    }
    B->side = flip;
    memcpy(B->hand[0], pos->hand[flip], MK_SHOGI_HAND_KINDS);
    memcpy(B->hand[1], pos->hand[1 - flip], MK_SHOGI_HAND_KINDS);
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

void mk_shogi_boards_position(const boards *B, mk_shogi_pos *pos) {
    int flip = B->side;
    for (int t = 0; t < MK_SHOGI_SQUARES; t++) {
        uint8_t p = B->cell[t];
        pos->board[flip ? 80 - t : t] = p ? (uint8_t)(p ^ (flip << 4)) : 0;
    }
    memcpy(pos->hand[flip], B->hand[0], MK_SHOGI_HAND_KINDS);
    memcpy(pos->hand[1 - flip], B->hand[1], MK_SHOGI_HAND_KINDS);
    pos->side = (uint8_t)flip;
}

/* mk_shogi_validate on boards made by make_boards (its return value in `bad`). The
 * rules are the same for both colours of the frame, so they are checked there. pos's
 * cells are read only if the position has a fault of the square-by-square kind, and then
 * only when `cells` says they are filled in (else they are made from the boards). */
static int validate_boards(const mk_shogi_pos *pos, const boards *B, int bad, int cells) {
    if (pos->side > 1) return MK_SHOGI_BAD_PIECE;
    int fault = bad;
    for (int c = 0; c < 2 && !fault; c++) {
        bb pawns = PIECES(B, c, MK_PAWN);
        if (((pawns | PIECES(B, c, MK_LANCE)) & last_rank[c]) || (PIECES(B, c, MK_KNIGHT) & last_two[c])) fault = 1;
        if (popcount(pawns) != popcount(file_heads(pawns))) fault = 1; /* two on a file */
    }
    if (fault) {
        mk_shogi_pos made;
        if (!cells) mk_shogi_boards_position(B, &made);
        int code = first_square_fault(cells ? pos : &made);
        if (code != MK_SHOGI_OK) return code;
    }
    if (!PIECES(B, 0, MK_KING) || !PIECES(B, 1, MK_KING)) return MK_SHOGI_BAD_KINGS;
    for (int c = 0; c < 2; c++) {
        bb k = PIECES(B, c, MK_KING);
        if (k & (k - 1)) return MK_SHOGI_BAD_KINGS;
    }
    int count[8];
    for (int k = 0; k < 8; k++) {
        bb x = PIECES(B, 0, k) | PIECES(B, 1, k);
        if (k < MK_GOLD) x |= PIECES(B, 0, k + 8) | PIECES(B, 1, k + 8);
        count[k] = popcount(x);
    }
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++) count[h] += pos->hand[c][h];
    for (int k = 0; k < 8; k++)
        if (count[k] > max_count[k]) return MK_SHOGI_TOO_MANY;
    if (attackers_to(B, B->king[1], 0, B->all)) return MK_SHOGI_KING_CAPTURABLE;
    return MK_SHOGI_OK;
}

int mk_shogi_validate(const mk_shogi_pos *pos) {
    init();
    boards B;
    int bad = make_boards(pos, &B);
    return validate_boards(pos, &B, bad, 1);
}

int mk_shogi_validate_boards(const mk_shogi_pos *pos, const boards *B) { return validate_boards(pos, B, 0, 0); }

/* Would our pawn dropped on t (the square in front of the enemy king) mate? */
static int pawn_drop_mates(const boards *B, int t) {
    int k = B->king[1];
    bb occ = B->all | square_bb[t];
    /* The pawn taken by a piece other than the king that is not pinned: after the capture
     * the only new attack on the king can come from a slider the piece was blocking. */
    bb takers = attackers_to(B, t, 1, occ) & ~square_bb[k];
    FOR_SQUARES(takers, x, {
        if (!slider_attackers(B, k, 0, occ ^ square_bb[x])) return 0;
    });
    /* A king step to a square we do not attack (the pawn's square included: the pawn
     * attacks only the king's square), with the king lifted off the board. */
    bb lifted = occ ^ square_bb[k];
    FOR_SQUARES(step[1][ST_KING][k] & ~B->occ[1], y, {
        if (!attackers_to(B, y, 0, lifted)) return 0;
    });
    return 1;
}

/* The board shifted one step along direction d (0..7, as ray[]) or a knight's jump
 * (8: up two, file + 1; 9: up two, file - 1), with the squares that would wrap into the
 * next file or leave the board dropped. d is a constant at every call. */
static inline bb shift(int d, bb x) {
    switch (d) {
    case 0: return (x >> 1) & not_rank_i;
    case 1: return (x << 8) & not_rank_i & board_bb;
    case 2: return (x >> 10) & not_rank_i;
    case 3: return (x << 9) & board_bb;
    case 4: return x >> 9;
    case 5: return (x << 1) & not_rank_a & board_bb;
    case 6: return (x << 10) & not_rank_a & board_bb;
    case 7: return (x >> 8) & not_rank_a;
    case 8: return (x << 7) & not_rank_hi & board_bb;
    default: return (x >> 11) & not_rank_hi;
    }
}

/* Label sets: set[d] holds the destinations (frame squares) of the legal moves whose
 * dlshogi direction is d (0..26), so label d * 81 + t for each t of set[d]. */
#define NUM_DIRECTIONS 27

/* Every legal move of the side to move (colour 0 of the frame), as label sets. Pieces
 * that are not pinned move kind by kind all at once where they step (the kind's set
 * shifted along each of its directions) and one by one, one ray at a time, where they
 * slide; pinned pieces one by one, within their pin line. */
static void generate(const boards *B, bb *set) {
    int k0 = B->king[0];
    bb occ = B->all, ours = B->occ[0];
    memset(set, 0, NUM_DIRECTIONS * sizeof *set);

    /* Checkers: the stepping pieces next to (or a knight's jump from) the king, and the
     * snipers with nothing between; pins: snipers with exactly one of ours between. */
    bb checkers = (step[0][ST_PAWN][k0] & PIECES(B, 1, MK_PAWN)) | (step[0][ST_KNIGHT][k0] & PIECES(B, 1, MK_KNIGHT)) |
                  (step[0][ST_SILVER][k0] & PIECES(B, 1, MK_SILVER)) | (step[0][ST_GOLD][k0] & GOLDS(B, 1)) |
                  (step[0][ST_KING][k0] & KINGLIKE(B, 1));
    bb block = 0, pinned = 0;
    int pin_square[8];
    bb pin_line[8];
    int pins = 0;
    bb snipers = (ray[0][k0] & PIECES(B, 1, MK_LANCE)) | (rook_empty[k0] & ROOKS(B, 1)) |
                 (bishop_empty[k0] & BISHOPS(B, 1));
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
     * that it cannot step back along a slider's line), each tested on its own. */
    bb lifted = occ ^ square_bb[k0];
    FOR_SQUARES(step[0][ST_KING][k0] & ~ours, t, {
        if (!attackers_to(B, t, 1, lifted)) set[line_dir[k0][t]] |= square_bb[t];
    });
    if (checkers & (checkers - 1)) return; /* double check: only the king moves */

    bb target = ~ours & board_bb, drop_to = ~occ & board_bb;
    if (checkers) {
        target = checkers | block;
        drop_to = block;
    }
    bb z = zone[0];

    /* Stepping pieces that are not pinned. Promotion where the move starts or ends in the
     * zone (a pawn or knight only ever ends there when it starts there); a pawn cannot
     * stay unpromoted on the last rank, nor a knight on the last two. */
    {
        bb to = shift(0, PIECES(B, 0, MK_PAWN) & ~pinned) & target;
        set[0] |= to & ~last_rank[0];
        set[10] |= to & z;
    }
    {
        bb silvers = PIECES(B, 0, MK_SILVER) & ~pinned, in_zone = silvers & z;
#define SILVER_STEP(d)                                                                             \
    do {                                                                                           \
        bb to = shift(d, silvers) & target;                                                        \
        set[d] |= to;                                                                              \
        set[10 + d] |= (to & z) | (shift(d, in_zone) & target);                                   \
    } while (0)
        if (silvers) {
            SILVER_STEP(0);
            SILVER_STEP(1);
            SILVER_STEP(2);
            SILVER_STEP(6);
            SILVER_STEP(7);
        }
#undef SILVER_STEP
    }
    {
        bb knights = PIECES(B, 0, MK_KNIGHT) & ~pinned; /* a pinned knight never moves */
        if (knights) {
            bb a = shift(8, knights) & target, b = shift(9, knights) & target;
            set[8] |= a & ~last_two[0];
            set[9] |= b & ~last_two[0];
            set[18] |= a & z;
            set[19] |= b & z;
        }
    }
    {
        bb golds = GOLDS(B, 0) & ~pinned;
        if (golds)
            for (int d = 0; d < 6; d++) set[d] |= shift(d, golds) & target;
    }

    /* Sliding pieces that are not pinned, one ray at a time. */
    FOR_SQUARES(PIECES(B, 0, MK_LANCE) & ~pinned, f, {
        bb a = slide(0, f, occ) & target;
        set[0] |= a & ~last_rank[0];
        set[10] |= a & z;
    });
#define SLIDES(d, promotes)                                                                        \
    do {                                                                                           \
        bb a = slide(d, f, occ) & target;                                                          \
        set[d] |= a;                                                                               \
        if (promotes) set[10 + d] |= from_zone ? a : a & z;                                        \
    } while (0)
#define STEPS(d) set[d] |= step_one[d][f] & target
    FOR_SQUARES(PIECES(B, 0, MK_BISHOP) & ~pinned, f, {
        int from_zone = (z & square_bb[f]) != 0;
        SLIDES(1, 1);
        SLIDES(2, 1);
        SLIDES(6, 1);
        SLIDES(7, 1);
    });
    FOR_SQUARES(PIECES(B, 0, MK_ROOK) & ~pinned, f, {
        int from_zone = (z & square_bb[f]) != 0;
        SLIDES(0, 1);
        SLIDES(3, 1);
        SLIDES(4, 1);
        SLIDES(5, 1);
    });
    FOR_SQUARES(PIECES(B, 0, MK_HORSE) & ~pinned, f, {
        int from_zone = 0;
        SLIDES(1, 0);
        SLIDES(2, 0);
        SLIDES(6, 0);
        SLIDES(7, 0);
        STEPS(0);
        STEPS(3);
        STEPS(4);
        STEPS(5);
    });
    FOR_SQUARES(PIECES(B, 0, MK_DRAGON) & ~pinned, f, {
        int from_zone = 0;
        SLIDES(0, 0);
        SLIDES(3, 0);
        SLIDES(4, 0);
        SLIDES(5, 0);
        STEPS(1);
        STEPS(2);
        STEPS(6);
        STEPS(7);
    });
#undef SLIDES
#undef STEPS

    /* Pinned pieces: along their pin line only (so never a knight's jump), the direction
     * of each move read from the line table. */
    FOR_SQUARES(pinned, f, {
        bb line = 0;
        for (int i = 0; i < pins; i++)
            if (pin_square[i] == f) line = pin_line[i];
        int k = MK_SHOGI_KIND(B->cell[f]);
        bb a;
        switch (k) {
        case MK_PAWN: a = step[0][ST_PAWN][f]; break;
        case MK_LANCE: a = slide(0, f, occ); break;
        case MK_KNIGHT: a = 0; break;
        case MK_SILVER: a = step[0][ST_SILVER][f]; break;
        case MK_BISHOP: a = bishop_attack(f, occ); break;
        case MK_ROOK: a = rook_attack(f, occ); break;
        case MK_HORSE: a = bishop_attack(f, occ) | step[0][ST_KING][f]; break;
        case MK_DRAGON: a = rook_attack(f, occ) | step[0][ST_KING][f]; break;
        default: a = step[0][ST_GOLD][f]; break;
        }
        a &= target & line;
        bb promote = 0, stay = a;
        if (k <= MK_ROOK) {
            promote = (z & square_bb[f]) ? a : a & z;
            if (k == MK_PAWN || k == MK_LANCE) stay &= ~last_rank[0];
        }
        FOR_SQUARES(stay, t, set[line_dir[f][t]] |= square_bb[t];);
        FOR_SQUARES(promote, t, set[10 + line_dir[f][t]] |= square_bb[t];);
    });

    /* Drops: on empty squares (in check, between the checker and the king), pawns and
     * lances not on the last rank, knights not on the last two, pawns not on a file
     * holding one of our unpromoted pawns nor where they would mate. */
    if (!drop_to) return;
    const uint8_t *hand = B->hand[0];
    for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++) {
        if (!hand[h]) continue;
        bb to = drop_to;
        if (h == MK_PAWN) {
            bb heads = file_heads(PIECES(B, 0, MK_PAWN));
            to &= ~(last_rank[0] | heads | (heads - (heads >> 8))); /* heads - heads >> 8: ranks a..h */
            bb mate_square = step[1][ST_PAWN][B->king[1]] & to;
            if (mate_square && pawn_drop_mates(B, lsb(mate_square))) to ^= mate_square;
        } else if (h == MK_LANCE) {
            to &= ~last_rank[0];
        } else if (h == MK_KNIGHT) {
            to &= ~last_two[0];
        }
        set[20 + h] = to;
    }
}

/* The square a legal move with direction d (0..9) to t comes from: a knight's jump back,
 * or the nearest piece on the ray back from t (the move exists, so the nearest is ours:
 * a farther piece on that ray could not pass it). */
static int source_square(const boards *B, int d, int t) {
    if (d == 8) return t - 7;
    if (d == 9) return t + 11;
    static const int back[8] = {5, 7, 6, 4, 3, 0, 2, 1}; /* the opposite direction */
    int e = back[d];
    bb b = ray[e][t] & B->all;
    return (e == 1 || e == 3 || e == 5 || e == 6) ? lsb(b) : msb(b);
}

int mk_shogi_legal_moves_labels(const mk_shogi_pos *pos, uint16_t *moves, int32_t *labels) {
    init();
    boards B;
    make_boards(pos, &B);
    bb set[NUM_DIRECTIONS];
    generate(&B, set);
    int n = 0, flip = B.side;
    for (int d = 0; d < NUM_DIRECTIONS; d++)
        FOR_SQUARES(set[d], t, {
            int to = flip ? 80 - t : t, from;
            if (d >= 20) {
                from = 81 + d - 20;
            } else {
                from = source_square(&B, d % 10, t);
                if (flip) from = 80 - from;
            }
            moves[n] = (uint16_t)(to | from << 7 | (d >= 10 && d < 20) << 14);
            labels[n++] = d * 81 + t;
        });
    return n;
}

int mk_shogi_legal_moves(const mk_shogi_pos *pos, uint16_t *moves) {
    int32_t labels[MK_SHOGI_MAX_MOVES];
    return mk_shogi_legal_moves_labels(pos, moves, labels);
}

/* The sorted labels are the label sets read in order (direction, then square): no sort.
 * The recorded move is legal when its label is in the sets and it comes from where the
 * legal move with that label comes from (labels are unique among a position's moves). */
int mk_shogi_legal_labels_boards(const mk_shogi_pos *pos, const boards *B, uint16_t move, int32_t *labels,
                                 int32_t *target) {
    (void)pos;
    bb set[NUM_DIRECTIONS];
    generate(B, set);
    int m = 0;
    for (int d = 0; d < NUM_DIRECTIONS; d++) {
        int base = d * 81;
        FOR_SQUARES(set[d], t, labels[m++] = base + t;);
    }
    *target = -1;
    int to = move & 127, from = move >> 7 & 127, promote = move >> 14 & 1;
    if (move >> 15 || to >= MK_SHOGI_SQUARES) return m;
    if (B->side) to = 80 - to;
    int d;
    if (from >= MK_SHOGI_SQUARES) {
        if (promote || from >= MK_SHOGI_SQUARES + MK_SHOGI_HAND_KINDS) return m;
        d = 20 + from - MK_SHOGI_SQUARES;
    } else {
        if (B->side) from = 80 - from;
        d = label_direction(from, to);
        if (!(set[d + 10 * promote] & square_bb[to]) || source_square(B, d, to) != from) return m;
        d += 10 * promote;
    }
    if (!(set[d] & square_bb[to])) return m;
    int played = d * 81 + to, lo = 0, hi = m - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (labels[mid] < played) lo = mid + 1;
        else hi = mid;
    }
    *target = lo;
    return m;
}

int mk_shogi_legal_labels(const mk_shogi_pos *pos, uint16_t move, int32_t *labels, int32_t *target) {
    init();
    boards B;
    make_boards(pos, &B);
    return mk_shogi_legal_labels_boards(pos, &B, move, labels, target);
}

int mk_shogi_num_labels(int encoding) {
    static const int classes[MK_SHOGI_MOVE_ENCODINGS] = {1, 15, 30, 60, 120, 1680, 3360};
    return encoding >= 0 && encoding < MK_SHOGI_MOVE_ENCODINGS ? classes[encoding] * MK_SHOGI_NUM_LABELS : 0;
}

/* The squares a piece of colour 0 and kind k on s attacks through occupancy occ. */
static bb piece_attacks(int k, int s, bb occ) {
    switch (k) {
    case MK_PAWN: return step[0][ST_PAWN][s];
    case MK_LANCE: return slide(0, s, occ);
    case MK_KNIGHT: return step[0][ST_KNIGHT][s];
    case MK_SILVER: return step[0][ST_SILVER][s];
    case MK_BISHOP: return bishop_attack(s, occ);
    case MK_ROOK: return rook_attack(s, occ);
    case MK_KING: return step[0][ST_KING][s];
    case MK_HORSE: return bishop_attack(s, occ) | step[0][ST_KING][s];
    case MK_DRAGON: return rook_attack(s, occ) | step[0][ST_KING][s];
    default: return step[0][ST_GOLD][s]; /* gold and the promoted minor pieces */
    }
}

/* The class of the legal move with dlshogi label `label` (position.h). */
static int move_class(const boards *B, int encoding, int label) {
    int d = label / 81, t = label % 81, cell = B->cell[t];
    int cls = cell && MK_SHOGI_COLOR(cell) == 1 ? 1 + MK_SHOGI_KIND(cell) : 0;
    if (encoding == MK_SHOGI_MOVES_CAPTURE) return cls;
    bb occ = B->all | square_bb[t];
    int from = -1, kind, moving;
    if (d < 20) {
        from = source_square(B, d % 10, t);
        occ &= ~square_bb[from];
        kind = moving = MK_SHOGI_KIND(B->cell[from]);
        if (d >= 10) kind += MK_PRO_PAWN - MK_PAWN; /* P L N S B R promote to kind + 8 */
    } else {
        kind = moving = d - 20; /* hand kinds P L N S B R G are board kinds 0..6 */
    }
    /* the captured piece is on t and attacks no square of its own: attackers_to is exact */
    cls += attackers_to(B, t, 1, occ) ? 15 : 0;
    /* supported: another of our pieces attacks t once the move is made (x-rays through the
     * mover count, as for "defended") */
    const int supported = (attackers_to(B, t, 0, occ) & ~(from >= 0 ? square_bb[from] : 0)) != 0;
    if (encoding == MK_SHOGI_MOVES_CAPTURE_DEFENDED) return cls;
    /* check: the mover from t, or one of our sliders it uncovers (the mover's old square
     * left out: occ no longer has it, but the piece boards still do) */
    int king = B->king[1];
    bb mover = from >= 0 ? square_bb[from] : 0;
    cls += king >= 0 && ((piece_attacks(kind, t, occ) & square_bb[king]) ||
                         (slider_attackers(B, king, 0, occ) & ~mover))
               ? 30 : 0;
    if (encoding == MK_SHOGI_MOVES_CHECK) return cls;
    cls += from >= 0 && attackers_to(B, from, 1, B->all) ? 60 : 0;
    if (encoding == MK_SHOGI_MOVES_ESCAPE) return cls;
    cls += 120 * moving;
    if (encoding == MK_SHOGI_MOVES_MOVER) return cls;
    return cls + 1680 * supported;
}

void mk_shogi_encode_labels_boards(const boards *B, int encoding, int32_t *labels, int n) {
    if (encoding == MK_SHOGI_MOVES_DLSHOGI) return;
    for (int i = 0; i < n; i++) labels[i] += MK_SHOGI_NUM_LABELS * move_class(B, encoding, labels[i]);
}

int mk_shogi_legal_moves_encoded(const mk_shogi_pos *pos, int encoding, uint16_t *moves, int32_t *labels) {
    init();
    boards B;
    make_boards(pos, &B);
    int n = mk_shogi_legal_moves_labels(pos, moves, labels);
    mk_shogi_encode_labels_boards(&B, encoding, labels, n);
    return n;
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
    (void)pos; /* the boards hold everything */
    pthread_once(&token_once, init_token_base);
    /* One pass over the occupied squares of the side to move's frame, in ascending order:
     * its perspective takes them forwards, the opponent's (rotated once more, s -> 80 - s)
     * backwards, so that each comes out in its own square order. */
    int m = popcount(B->all);
    if (m > MK_SHOGI_TOKENS) { /* never after validation (at most the 40 pieces of a set) */
        mk_shogi_pos made;
        mk_shogi_boards_position(B, &made);
        mk_shogi_tokens(&made, tokens);
        return;
    }
    int32_t *own = tokens, *other = tokens + MK_SHOGI_TOKENS + m - 1;
    const int16_t *t0 = token_base[0], *t1 = token_base[1];
    int i = 0;
    FOR_SQUARES(B->all, s, {
        unsigned p = B->cell[s];
        own[i] = t0[p] + s;
        other[-i] = t1[p] + 80 - s;
        i++;
    });
    /* The hands: each colour's tokens relative to its block, written after the board
     * tokens of both perspectives (the perspective owner's hand first). */
    int16_t rel[2][MK_SHOGI_TOKENS];
    int nrel[2] = {0, 0};
    for (int c = 0; c < 2; c++) {
        const uint8_t *hand = B->hand[c];
        for (int k = 0; k < 7; k++) {
            int have = hand[token_hand_kind[k]];
            if (!have) continue;
            int room = token_hand_offset[k + 1] - token_hand_offset[k];
            if (have > room) have = room;
            for (int j = 0; j < have && nrel[c] < MK_SHOGI_TOKENS; j++) rel[c][nrel[c]++] = (int16_t)(token_hand_offset[k] + j);
        }
    }
    for (int v = 0; v < 2; v++) {
        int n = m;
        int32_t *out = tokens + v * MK_SHOGI_TOKENS;
        for (int c = 0; c < 2; c++) {
            int h = c ^ v, have = nrel[h], first = 2268 + c * 38;
            if (have > MK_SHOGI_TOKENS - n) have = MK_SHOGI_TOKENS - n;
            for (int j = 0; j < have; j++) out[n++] = first + rel[h][j];
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
