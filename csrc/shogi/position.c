/* Legal move generation, labels and tokens: see position.h.
 *
 * The generator works on a padded copy of the board (11 files x 13 ranks: one wall file
 * on each side, two wall ranks above and below so a knight's jump never leaves the array).
 * Legality without making moves: the checkers and the pinned pieces are found once by
 * looking outward from the king; a non-king move is legal when it keeps a pinned piece on
 * its pin line and, in check, captures the single checker or blocks its line; a king move
 * when its destination is not attacked with the king lifted off the board (so it cannot
 * step back along a slider's line). A pawn drop that checks is tried on a copy, which is
 * refused when the opponent has no legal reply (no pawn-drop mate). */
#include "position.h"

#include <string.h>

#define W 13                    /* padded cells per file */
#define PAD(s) ((((s) / 9) + 1) * W + ((s) % 9) + 2)
#define WALL 0xFF
#define NONE 0xFF
#define CELLS (11 * W)

/* Square (0..80) and rank (0 = a) of each padded cell, -1 on the walls: tables instead of
 * divisions by 13 on every emitted move. */
#define WALLS13 -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1
#define FILE13(f) -1, -1, 9 * f, 9 * f + 1, 9 * f + 2, 9 * f + 3, 9 * f + 4, 9 * f + 5, 9 * f + 6, \
                  9 * f + 7, 9 * f + 8, -1, -1
#define RANKS13 -1, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, -1, -1
static const int8_t square_of[CELLS] = {WALLS13, FILE13(0), FILE13(1), FILE13(2), FILE13(3), FILE13(4),
                                        FILE13(5), FILE13(6), FILE13(7), FILE13(8), WALLS13};
static const int8_t rank_of[CELLS] = {WALLS13, RANKS13, RANKS13, RANKS13, RANKS13, RANKS13,
                                      RANKS13, RANKS13, RANKS13, RANKS13, WALLS13};
#define UNPAD(p) (square_of[p])

/* The 8 directions as (file, rank) steps, Black's view: 0 up (towards rank a), 1 up-left
 * (file + 1), 2 up-right, 3 left, 4 right, 5 down, 6 down-left, 7 down-right. */
static const int delta[8] = {-1, W - 1, -W - 1, W, -W, 1, W + 1, -W + 1};
static const int opposite[8] = {5, 7, 6, 4, 3, 0, 2, 1};

/* Per kind, Black-relative directions it steps (one square) and slides along. */
static const uint8_t step_mask[14] = {
    0x01, 0x00, 0x00, 0xC7, 0x00, 0x00, 0x3F, 0xFF, /* P L N S B R G K */
    0x3F, 0x3F, 0x3F, 0x3F, 0x39, 0xC6,             /* +P +L +N +S +B +R */
};
static const uint8_t slide_mask[14] = {
    0x00, 0x01, 0x00, 0x00, 0xC6, 0x39, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0xC6, 0x39,
};
static const int max_count[8] = {18, 4, 4, 4, 2, 2, 4, 2}; /* per unpromoted kind (kings: both) */

typedef struct {
    uint8_t b[CELLS];
    int king[2];       /* padded squares */
    int us, them;
} grid;

/* A file of the board is 9 consecutive cells in both layouts: one copy per file, and the
 * kings found with memchr (a square-by-square loop with PAD's divisions was ~10% of the
 * producer's time). */
static void make_grid(const mk_shogi_pos *pos, grid *g) {
    memset(g->b, WALL, sizeof g->b);
    for (int file = 0; file < 9; file++) memcpy(g->b + (file + 1) * W + 2, pos->board + 9 * file, 9);
    for (int c = 0; c < 2; c++) {
        const uint8_t *k = memchr(pos->board, MK_SHOGI_PIECE(c, MK_KING), MK_SHOGI_SQUARES);
        g->king[c] = k ? PAD((int)(k - pos->board)) : -1;
    }
    g->us = pos->side;
    g->them = 1 - pos->side;
}

/* The Black-relative direction in which a piece of `color` moves along absolute `dir`. */
static inline int relative(int color, int dir) { return color ? opposite[dir] : dir; }

/* Does a piece of `color` at padded square x attack padded square t, t being `distance`
 * steps away along absolute direction `dir` (x -> t)? */
static inline int hits(uint8_t piece, int dir, int distance) {
    int k = MK_SHOGI_KIND(piece), r = relative(MK_SHOGI_COLOR(piece), dir);
    if (slide_mask[k] >> r & 1) return 1;
    return distance == 1 && (step_mask[k] >> r & 1);
}

/* Knight squares of `color` attacking padded t (a Black knight jumps (+-1 file, -2 ranks)). */
static inline void knight_sources(int color, int t, int out[2]) {
    int dr = color ? -2 : 2;
    out[0] = t + W + dr;
    out[1] = t - W + dr;
}

static int attacked(const grid *g, int t, int by) {
    for (int d = 0; d < 8; d++) {
        int x = t, n = 0;
        for (;;) {
            x += delta[d], n++;
            uint8_t p = g->b[x];
            if (p == WALL) break;
            if (!p) continue;
            if (MK_SHOGI_COLOR(p) == by && hits(p, opposite[d], n)) return 1;
            break;
        }
    }
    int k[2];
    knight_sources(by, t, k);
    for (int i = 0; i < 2; i++) {
        uint8_t p = g->b[k[i]];
        if (p != WALL && p && MK_SHOGI_COLOR(p) == by && MK_SHOGI_KIND(p) == MK_KNIGHT) return 1;
    }
    return 0;
}

/* Rank seen from `color` (0 = its last rank). */
static inline int own_rank(int color, int p) {
    int r = rank_of[p];
    return color ? 8 - r : r;
}

/* Moves and, when `labels` is not NULL, their dlshogi labels: the generator knows each
 * move's direction as seen by the side to move (a step or slide along Black-relative
 * direction r is label direction r; a knight's jump is 8 or 9), so the label costs no
 * decoding of the move (mk_shogi_label; shogi_analyse checks that they agree). */
typedef struct {
    uint16_t *moves;
    int32_t *labels;
    int n, us;
} sink;

static inline void emit(sink *out, int from, int to, int promote, int direction) {
    out->moves[out->n] = (uint16_t)(to | from << 7 | promote << 14);
    if (out->labels) out->labels[out->n] = (direction + 10 * promote) * 81 + (out->us ? 80 - to : to);
    out->n++;
}

/* A board move of kind k from padded f to padded t: with and/or without promotion. */
static void emit_board(sink *out, int us, int k, int f, int t, int direction) {
    int from = UNPAD(f), to = UNPAD(t);
    if (k > MK_ROOK) { /* gold, king, promoted pieces */
        emit(out, from, to, 0, direction);
        return;
    }
    int rf = own_rank(us, f), rt = own_rank(us, t);
    if (rf <= 2 || rt <= 2) emit(out, from, to, 1, direction);
    int forced = ((k == MK_PAWN || k == MK_LANCE) && rt == 0) || (k == MK_KNIGHT && rt <= 1);
    if (!forced) emit(out, from, to, 0, direction);
}

static int generate(const mk_shogi_pos *pos, uint16_t *moves, int32_t *labels, int stop_at_first);

/* Would dropping a pawn of `us` on padded t (checking the enemy king) mate? */
static int pawn_drop_mates(const mk_shogi_pos *pos, int t) {
    mk_shogi_pos next = *pos;
    next.board[UNPAD(t)] = MK_SHOGI_PIECE(pos->side, MK_PAWN);
    next.hand[pos->side][MK_PAWN]--;
    next.side = 1 - pos->side;
    uint16_t reply[MK_SHOGI_MAX_MOVES];
    /* The reply cannot be a drop (the check is adjacent), so this does not recurse. */
    return generate(&next, reply, NULL, 1) == 0;
}

static int generate(const mk_shogi_pos *pos, uint16_t *moves, int32_t *labels, int stop_at_first) {
    grid g;
    make_grid(pos, &g);
    int us = g.us, them = g.them, k0 = g.king[us];
    sink out = {moves, labels, 0, us};
    uint8_t pin[CELLS], allowed[CELLS];
    memset(pin, NONE, sizeof pin);
    int checkers = 0;
    memset(allowed, 0, sizeof allowed);

    /* Checkers and pins, looking outward from the king. */
    for (int d = 0; d < 8; d++) {
        int x = k0, n = 0, own = -1;
        for (;;) {
            x += delta[d], n++;
            uint8_t p = g.b[x];
            if (p == WALL) break;
            if (!p) continue;
            if (MK_SHOGI_COLOR(p) == us) {
                if (own >= 0) break;
                own = x;
                continue;
            }
            if (hits(p, opposite[d], n)) {
                if (own >= 0) {
                    pin[own] = (uint8_t)d;
                } else {
                    checkers++;
                    for (int y = k0 + delta[d]; y != x; y += delta[d]) allowed[y] = 2; /* block */
                    allowed[x] = 1;                                                 /* capture */
                }
            }
            break;
        }
    }
    int ks[2];
    knight_sources(them, k0, ks);
    for (int i = 0; i < 2; i++) {
        uint8_t p = g.b[ks[i]];
        if (p != WALL && p && MK_SHOGI_COLOR(p) == them && MK_SHOGI_KIND(p) == MK_KNIGHT) {
            checkers++;
            allowed[ks[i]] = 1;
        }
    }

    /* King moves, with the king lifted so that it cannot hide behind itself. */
    g.b[k0] = 0;
    for (int d = 0; d < 8; d++) {
        int t = k0 + delta[d];
        uint8_t p = g.b[t];
        if (p == WALL || (p && MK_SHOGI_COLOR(p) == us)) continue;
        if (!attacked(&g, t, them)) {
            emit(&out, UNPAD(k0), UNPAD(t), 0, relative(us, d));
            if (stop_at_first) return out.n;
        }
    }
    g.b[k0] = MK_SHOGI_PIECE(us, MK_KING);
    if (checkers >= 2) return out.n;

    /* Other pieces: the padded cells from 1a to 9i (walls have colour 15). */
    for (int f = PAD(0); f <= PAD(80); f++) {
        uint8_t p = g.b[f];
        if (!p || MK_SHOGI_COLOR(p) != us) continue;
        int k = MK_SHOGI_KIND(p);
        if (k == MK_KING) continue;
        if (k == MK_KNIGHT) {
            if (pin[f] != NONE) continue; /* a knight never moves along a line */
            int dr = us ? 2 : -2;
            int ts[2] = {f + W + dr, f - W + dr};
            for (int i = 0; i < 2; i++) {
                uint8_t q = g.b[ts[i]];
                if (q == WALL || (q && MK_SHOGI_COLOR(q) == us)) continue;
                if (checkers && !allowed[ts[i]]) continue;
                /* f + W is a file up: UP2_LEFT (8) for Black, UP2_RIGHT (9) seen by White */
                emit_board(&out, us, k, f, ts[i], 8 + (i ^ us));
            }
            if (stop_at_first && out.n) return out.n;
            continue;
        }
        /* the directions the kind moves in, one bit each */
        for (unsigned dirs = step_mask[k] | slide_mask[k]; dirs; dirs &= dirs - 1) {
            int r = __builtin_ctz(dirs), slides = slide_mask[k] >> r & 1;
            int d = relative(us, r);
            if (pin[f] != NONE && d != pin[f] && d != opposite[pin[f]]) continue;
            int t = f;
            for (;;) {
                t += delta[d];
                uint8_t q = g.b[t];
                if (q == WALL || (q && MK_SHOGI_COLOR(q) == us)) break;
                if (!checkers || allowed[t]) emit_board(&out, us, k, f, t, r);
                if (q || !slides) break;
            }
        }
        if (stop_at_first && out.n) return out.n;
    }

    /* Drops: on empty squares, in check only between the checker and the king. */
    int kinds[MK_SHOGI_HAND_KINDS], nk = 0; /* the kinds in hand */
    for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++)
        if (pos->hand[us][h]) kinds[nk++] = h;
    if (!nk) return out.n;
    int pawn_file[9] = {0};
    for (int s = 0; s < MK_SHOGI_SQUARES; s++)
        if (pos->board[s] == MK_SHOGI_PIECE(us, MK_PAWN)) pawn_file[s / 9] = 1;
    int up = us ? 1 : -1, their_king = g.king[them];
    for (int t = PAD(0); t <= PAD(80); t++) {
        if (g.b[t]) continue; /* a piece or a wall */
        if (checkers && allowed[t] != 2) continue;
        int s = UNPAD(t), rank = own_rank(us, t);
        for (int i = 0; i < nk; i++) {
            int h = kinds[i];
            if ((h == MK_PAWN || h == MK_LANCE) && rank == 0) continue;
            if (h == MK_KNIGHT && rank <= 1) continue;
            if (h == MK_PAWN) {
                if (pawn_file[s / 9]) continue;
                if (t + up == their_king && pawn_drop_mates(pos, t)) continue;
            }
            emit(&out, 81 + h, s, 0, 20 + h);
            if (stop_at_first) return out.n;
        }
    }
    return out.n;
}

int mk_shogi_legal_moves(const mk_shogi_pos *pos, uint16_t *moves) {
    return generate(pos, moves, NULL, 0);
}

int mk_shogi_legal_moves_labels(const mk_shogi_pos *pos, uint16_t *moves, int32_t *labels) {
    return generate(pos, moves, labels, 0);
}

int mk_shogi_validate(const mk_shogi_pos *pos) {
    if (pos->side > 1) return MK_SHOGI_BAD_PIECE;
    int count[8] = {0}, kings[2] = {0};
    int pawns[2][9] = {{0}};
    for (int file = 0, s = 0; file < 9; file++)
        for (int r = 0; r < 9; r++, s++) {
            uint8_t p = pos->board[s];
            if (!p) continue;
            int k = MK_SHOGI_KIND(p), c = MK_SHOGI_COLOR(p);
            if (k < 0 || k > 13 || c > 1) return MK_SHOGI_BAD_PIECE;
            count[k >= 8 ? k - 8 : k]++;
            if (k == MK_KING) kings[c]++;
            int rank = c ? 8 - r : r;
            if (((k == MK_PAWN || k == MK_LANCE) && rank == 0) || (k == MK_KNIGHT && rank <= 1))
                return MK_SHOGI_DEAD_PIECE;
            if (k == MK_PAWN && pawns[c][file]++) return MK_SHOGI_TWO_PAWNS;
        }
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++) count[h] += pos->hand[c][h];
    if (kings[0] != 1 || kings[1] != 1) return MK_SHOGI_BAD_KINGS;
    for (int k = 0; k < 8; k++)
        if (count[k] > max_count[k]) return MK_SHOGI_TOO_MANY;
    grid g;
    make_grid(pos, &g);
    if (attacked(&g, g.king[g.them], g.us)) return MK_SHOGI_KING_CAPTURABLE;
    return MK_SHOGI_OK;
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
    int dir_x = from / 9 - to / 9, dir_y = to % 9 - from % 9, dir;
    if (dir_y < 0 && dir_x == 0) dir = 0;
    else if (dir_y == -2 && dir_x == -1) dir = 8;
    else if (dir_y == -2 && dir_x == 1) dir = 9;
    else if (dir_y < 0 && dir_x < 0) dir = 1;
    else if (dir_y < 0 && dir_x > 0) dir = 2;
    else if (dir_y == 0 && dir_x < 0) dir = 3;
    else if (dir_y == 0 && dir_x > 0) dir = 4;
    else if (dir_y > 0 && dir_x == 0) dir = 5;
    else if (dir_y > 0 && dir_x < 0) dir = 6;
    else dir = 7;
    return (dir + 10 * promote) * 81 + to;
}

/* Hand kinds in token order P L N S G B R (internal hand order is P L N S B R G). */
static const int token_hand_kind[7] = {MK_PAWN, MK_LANCE, MK_KNIGHT, MK_SILVER, MK_GOLD,
                                       MK_BISHOP, MK_ROOK};
static const int token_hand_offset[7] = {0, 18, 22, 26, 30, 34, 36};

void mk_shogi_tokens(const mk_shogi_pos *pos, int32_t *tokens) {
    /* One scan for the occupied squares; Black's perspective reads them in square order,
     * White's (rotated, s -> 80 - s) in reverse, so both come out in their square order. */
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
                int room = (i < 6 ? token_hand_offset[i + 1] : 38) - token_hand_offset[i];
                for (int j = 0; j < have && j < room && n < MK_SHOGI_TOKENS; j++)
                    out[n++] = 2268 + c * 38 + token_hand_offset[i] + j;
            }
        }
        while (n < MK_SHOGI_TOKENS) out[n++] = -1;
    }
}

int mk_shogi_legal_labels(const mk_shogi_pos *pos, uint16_t move, int32_t *labels,
                          int32_t *target) {
    uint16_t moves[MK_SHOGI_MAX_MOVES];
    int32_t unsorted[MK_SHOGI_MAX_MOVES];
    int n = mk_shogi_legal_moves_labels(pos, moves, unsorted);
    uint64_t bits[(MK_SHOGI_NUM_LABELS + 63) / 64] = {0};
    int played = -1;
    for (int i = 0; i < n; i++) {
        int l = unsorted[i];
        bits[l >> 6] |= 1ull << (l & 63);
        if (moves[i] == move) played = l;
    }
    int m = 0;
    *target = -1;
    for (int w = 0; w < (MK_SHOGI_NUM_LABELS + 63) / 64; w++) {
        uint64_t x = bits[w];
        while (x) {
            int l = w * 64 + __builtin_ctzll(x);
            x &= x - 1;
            if (l == played) *target = m;
            labels[m++] = l;
        }
    }
    return m;
}
