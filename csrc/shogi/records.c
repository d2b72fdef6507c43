/* HCPE and PSV decoding: see records.h.
 *
 * Both positions are the same kind of Huffman code, read least significant bit first:
 * 1 bit side to move, 7 bits each for the Black and the White king's square, one code per
 * other square (a single 0 bit when empty), then one code per piece in hand until 256 bits
 * are read. A board code is an occupancy 1, the kind's code, then (except for gold) a
 * promotion bit and a colour bit; a hand code is the kind's code, a 0 and the colour.
 * Every piece of the set is coded, on the board or after it: a piece left out of the game
 * (a handicap) has a code of its own among the hand codes (build_tables), and a position
 * with fewer than 40 pieces decodes with fewer than 40 tokens.
 * The two formats' codes differ in details that the code tables below hold: Apery (HCPE)
 * swaps the knight's and the silver's codes, puts the colour bit before the promotion bit
 * and codes a bishop or rook in hand differently. Both list the squares in square order
 * (PSV as cshogi writes it: tests/shogi/test_shogi_records.py decodes cshogi's PSV).
 *
 * The decoder writes the position straight into the bitboards of the side to move's frame
 * (position.h), which mk_shogi_row hands to validation, the move generator and the
 * tokens. */
#include "records.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* Kind codes after the occupancy bit, P L N S B R G (hand kind order). */
static const uint8_t kind_bits[7] = {1, 3, 3, 3, 5, 5, 4};
static const uint8_t apery_code[7] = {0, 1, 3, 5, 15, 31, 7};
static const uint8_t yaneura_code[7] = {0, 1, 5, 3, 15, 31, 7};

typedef struct {
    uint8_t len;   /* 0: no code starts with these bits */
    uint8_t piece; /* board: cell value (0 empty); hand: 1 + hand kind + 16 * color, or
                    * 1 + hand kind + ABSENT for a piece left out of the game */
} code_entry;

#define ABSENT 32

/* [format][board/hand][next 8 bits] */
static code_entry table[2][2][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void add(code_entry *t, unsigned code, int len, uint8_t piece) {
    for (unsigned v = 0; v < 256; v++)
        if ((v & ((1u << len) - 1)) == code) t[v].len = (uint8_t)len, t[v].piece = piece;
}

static void build_tables(void) {
    for (int f = 0; f < 2; f++) {
        code_entry *board = table[f][0], *hand = table[f][1];
        add(board, 0, 1, 0);
        for (int h = 0; h < 7; h++) {
            int tl = kind_bits[h];
            unsigned type = f == MK_SHOGI_FORMAT_HCPE ? apery_code[h] : yaneura_code[h];
            for (int color = 0; color < 2; color++) {
                if (h == MK_GOLD) {
                    add(board, 1 | type << 1 | (unsigned)color << (1 + tl), tl + 2,
                        MK_SHOGI_PIECE(color, MK_GOLD));
                    add(hand, type | (unsigned)color << tl, tl + 1, (uint8_t)(1 + h + 16 * color));
                    continue;
                }
                for (int promo = 0; promo < 2; promo++) {
                    unsigned extra = f == MK_SHOGI_FORMAT_HCPE
                                         ? ((unsigned)color | (unsigned)promo << 1)
                                         : ((unsigned)promo | (unsigned)color << 1);
                    add(board, 1 | type << 1 | extra << (1 + tl), tl + 3,
                        MK_SHOGI_PIECE(color, promo ? h + 8 : h));
                }
                if (f == MK_SHOGI_FORMAT_PSV || h < MK_BISHOP)
                    add(hand, type | (unsigned)color << (tl + 1), tl + 2, (uint8_t)(1 + h + 16 * color));
            }
            /* Apery's bishop and rook in hand are 1111 1, then 0 (bishop) or 1 (rook),
             * then the colour, and not the board codes' kind bits. */
            if (f == MK_SHOGI_FORMAT_HCPE && (h == MK_BISHOP || h == MK_ROOK))
                for (int color = 0; color < 2; color++)
                    add(hand, 31u | (unsigned)(h == MK_ROOK) << 5 | (unsigned)color << 6, 7,
                        (uint8_t)(1 + h + 16 * color));
            /* A piece that is in neither hand nor on the board (a handicap game's: the
             * code has 256 bits only with all 40 pieces) is written as a hand code with
             * the promotion bit set and colour 0, which no piece in hand has; the gold,
             * which has no promotion bit, as the silver's code with the promotion and
             * colour bits set; Apery's bishop and rook as 1111 0, then 0 (bishop) or 1
             * (rook), then 0. These are the codes cshogi writes for both formats
             * (tests/shogi/test_shogi_handicap.py); any other code is refused. */
            unsigned box;
            int box_len = tl + 2;
            if (h == MK_GOLD) {
                int sl = kind_bits[MK_SILVER];
                box = (f == MK_SHOGI_FORMAT_HCPE ? apery_code : yaneura_code)[MK_SILVER] | 1u << sl | 1u << (sl + 1);
                box_len = sl + 2;
            } else if (f == MK_SHOGI_FORMAT_HCPE && (h == MK_BISHOP || h == MK_ROOK)) {
                box = 15u | (unsigned)(h == MK_ROOK) << 5;
                box_len = 7;
            } else {
                box = type | 1u << tl;
            }
            add(hand, box, box_len, (uint8_t)(1 + h + ABSENT));
        }
    }
}

/* The 256 bits plus 16 zero bytes, so that reading past the end gives zeros (a code that
 * runs past bit 256 is refused). */
typedef union {
    uint8_t byte[48];
    uint64_t w[6];
} bits;

static void load_bits(bits *b, const uint8_t *data) {
    memcpy(b->byte, data, 32);
    memset(b->byte + 32, 0, 16);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (int i = 0; i < 4; i++) b->w[i] = __builtin_bswap64(b->w[i]);
#endif
}

/* At least the 57 bits from bit k on (k <= 264), least significant first: an unaligned
 * load at k's byte (little-endian machines), else two words. */
static inline uint64_t peek(const bits *b, int k) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    int i = k >> 6;
    return (uint64_t)((((mk_shogi_bb)b->w[i + 1] << 64) | b->w[i]) >> (k & 63));
#else
    uint64_t v;
    memcpy(&v, b->byte + (k >> 3), 8);
    return v >> (k & 7);
#endif
}

/* The board's codes, square by square, into the boards in the side to move's frame (a
 * constant `flip`, 1 when White is to move: square s there is 80 - s and a piece's colour
 * bit is flipped). Each step reads the bits from `bit` on: a run of 0 bits (empty squares,
 * cut at the segment's end, as the next square of the next segment has a code again),
 * then the code of the piece that ends it. Bit 56 of the window is set, so that a run
 * never counts past the bits read (at least 57) and 8 bits after a run of up to 48 are
 * all read ones. A code or a run that ends past bit 256 is refused (the bits past 256 read
 * as zeros). Returns the next bit, or -1 on a bad code. */
static inline __attribute__((always_inline)) int decode_board(const bits *b, const code_entry *board_code,
                                                              const int *seg_start, const int *seg_end,
                                                              mk_shogi_boards *B, const int flip) {
    uint64_t(*words)[2] = B->piece_words;
    int bit = 15;
    for (int g = 0; g < 3; g++) {
        int s = seg_start[g], end = seg_end[g];
        while (s < end) {
            uint64_t x = peek(b, bit) | 1ull << 56;
            int run = __builtin_ctzll(x);
            if (run >= end - s) { /* the segment's other squares are empty */
                bit += end - s;
                break;
            }
            bit += run;
            s += run;
            if (run > 48) { /* too few bits left in x for a code: read again */
                if (bit > 256) return -1;
                continue;
            }
            code_entry e = board_code[(x >> run) & 255];
            if (!e.len) return -1;
            bit += e.len;
            int t = flip ? 80 - s : s;
            unsigned p = flip ? e.piece ^ 16u : e.piece;
            B->cell[t] = (uint8_t)p;
            words[p][MK_SHOGI_WORD(t)] |= 1ull << (t & 63);
            s++;
        }
        if (bit > 256) return -1;
    }
    return bit;
}

/* Decodes the position into its bitboards, and its side to move and hands into pos (not
 * its cells: the boards hold them). The board's squares are read a code at a time, except
 * that a run of empty squares (a run of 0 bits) is skipped at once: the run is the count
 * of trailing zeros, cut at the next king square (which has no code). */
static int decode_position(int format, const uint8_t *data, mk_shogi_pos *pos, mk_shogi_boards *B) {
    pthread_once(&table_once, build_tables);
    mk_shogi_init();
    memset(pos, 0, sizeof *pos);
    memset(B->piece, 0, sizeof B->piece);
    memset(B->cell, 0, sizeof B->cell);
    bits b;
    load_bits(&b, data);
    uint64_t head = b.w[0];
    pos->side = (uint8_t)(head & 1);
    int king[2] = {(int)(head >> 1 & 127), (int)(head >> 8 & 127)};
    B->side = pos->side;
    memset(B->hand, 0, sizeof B->hand);
    if (king[0] >= 81 || king[1] >= 81 || king[0] == king[1]) return MK_SHOGI_BAD_KINGS;
    /* The boards are in the side to move's frame (position.h). */
    int flip = pos->side;
    for (int c = 0; c < 2; c++) {
        int t = flip ? 80 - king[c] : king[c];
        uint8_t p = (uint8_t)(MK_SHOGI_PIECE(c, MK_KING) ^ (flip << 4));
        B->cell[t] = p;
        B->piece[p] = (mk_shogi_bb)1 << t;
    }
    /* The squares with a code: three segments around the kings' squares. */
    int lo = king[0] < king[1] ? king[0] : king[1], hi = king[0] ^ king[1] ^ lo;
    int seg_start[3] = {0, lo + 1, hi + 1}, seg_end[3] = {lo, hi, 81};
    const code_entry *board_code = table[format][0];
    int bit = flip ? decode_board(&b, board_code, seg_start, seg_end, B, 1)
                   : decode_board(&b, board_code, seg_start, seg_end, B, 0);
    if (bit < 0) return MK_SHOGI_BAD_CODE;
    const code_entry *hand_code = table[format][1];
    int absent[MK_SHOGI_HAND_KINDS] = {0};
    while (bit < 256) {
        code_entry e = hand_code[peek(&b, bit) & 255];
        if (!e.len || bit + e.len > 256) return MK_SHOGI_BAD_CODE;
        bit += e.len;
        int h = (e.piece & 15) - 1;
        if (e.piece & ABSENT) {
            absent[h]++;
            continue;
        }
        int color = e.piece >> 4;
        if (pos->hand[color][h] == 255) return MK_SHOGI_TOO_MANY;
        pos->hand[color][h]++;
    }
    memcpy(B->hand[0], pos->hand[flip], MK_SHOGI_HAND_KINDS);
    memcpy(B->hand[1], pos->hand[1 - flip], MK_SHOGI_HAND_KINDS);
    mk_shogi_boards_finish(B);
    /* The pieces left out count with those in hand towards a set's pieces of each kind
     * (validation reads only the side and the hands of pos): a code that leaves out more
     * than the set holds is refused like one with too many pieces. */
    mk_shogi_pos counted = *pos;
    for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++) {
        int n = counted.hand[0][h] + absent[h];
        counted.hand[0][h] = (uint8_t)(n > 255 ? 255 : n);
    }
    return mk_shogi_validate_boards(&counted, B);
}

/* ---------------------------------------------------------------- encoding (HCPE) */

/* Appends the `len` low bits of `code` at bit *at, least significant first. */
static void put_bits(uint8_t *out, int *at, unsigned code, int len) {
    for (int i = 0; i < len; i++, (*at)++)
        if (code >> i & 1) out[*at >> 3] |= (uint8_t)(1u << (*at & 7));
}

/* The codes build_tables reads for HCPE, written out: a board piece is the occupancy bit,
 * the kind's code, then (except gold) the colour and the promotion bit; a piece in hand
 * is the kind's code, a 0 and the colour (gold: no 0), and a bishop or rook in hand is
 * 11111, then 0 (bishop) or 1 (rook), then the colour. */
static void put_board_piece(uint8_t *out, int *at, uint8_t cell) {
    int kind = MK_SHOGI_KIND(cell), color = MK_SHOGI_COLOR(cell);
    int promo = kind >= MK_PRO_PAWN, h = promo ? kind - MK_PRO_PAWN : kind, tl = kind_bits[h];
    unsigned code = 1u | (unsigned)apery_code[h] << 1;
    if (h == MK_GOLD) put_bits(out, at, code | (unsigned)color << (1 + tl), tl + 2);
    else put_bits(out, at, code | ((unsigned)color | (unsigned)promo << 1) << (1 + tl), tl + 3);
}

static void put_hand_piece(uint8_t *out, int *at, int h, int color) {
    int tl = kind_bits[h];
    if (h == MK_GOLD) put_bits(out, at, apery_code[h] | (unsigned)color << tl, tl + 1);
    else if (h == MK_BISHOP || h == MK_ROOK) put_bits(out, at, 31u | (unsigned)(h == MK_ROOK) << 5 | (unsigned)color << 6, 7);
    else put_bits(out, at, apery_code[h] | (unsigned)color << (tl + 1), tl + 2);
}

int mk_shogi_encode_hcp(const mk_shogi_pos *pos, uint8_t *hcp) {
    int status = mk_shogi_validate(pos);
    if (status != MK_SHOGI_OK) return status;
    /* a full set: every kind's count (board, promoted or not, and both hands) at its
     * maximum; validation has checked none is above it */
    static const int full[7] = {18, 4, 4, 4, 2, 2, 4}; /* P L N S B R G */
    int count[7] = {0}, king[2] = {-1, -1};
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        uint8_t p = pos->board[s];
        if (!p) continue;
        int kind = MK_SHOGI_KIND(p);
        if (kind == MK_KING) king[MK_SHOGI_COLOR(p)] = s;
        else count[kind >= MK_PRO_PAWN ? kind - MK_PRO_PAWN : kind]++;
    }
    for (int h = 0; h < MK_SHOGI_HAND_KINDS; h++)
        if (count[h] + pos->hand[0][h] + pos->hand[1][h] != full[h]) return MK_SHOGI_NOT_FULL_SET;
    memset(hcp, 0, 32);
    int at = 0;
    put_bits(hcp, &at, pos->side, 1);
    put_bits(hcp, &at, (unsigned)king[0], 7);
    put_bits(hcp, &at, (unsigned)king[1], 7);
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        uint8_t p = pos->board[s];
        if (s == king[0] || s == king[1]) continue;
        if (p) put_board_piece(hcp, &at, p);
        else put_bits(hcp, &at, 0, 1);
    }
    /* Apery's hand order: Black's then White's, each P L N S G B R */
    static const int hand_order[7] = {MK_PAWN, MK_LANCE, MK_KNIGHT, MK_SILVER, MK_GOLD, MK_BISHOP, MK_ROOK};
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 7; i++)
            for (int n = 0; n < pos->hand[c][hand_order[i]]; n++) put_hand_piece(hcp, &at, hand_order[i], c);
    return at == 256 ? MK_SHOGI_OK : MK_SHOGI_BAD_CODE; /* a full set always fills 256 bits */
}

static uint16_t read_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

int mk_shogi_decode_boards(int format, const uint8_t *rec, mk_shogi_record *out, mk_shogi_boards *B) {
    int status = decode_position(format, rec, &out->pos, B);
    if (status != MK_SHOGI_OK) return status;
    out->eval = (int16_t)read_u16(rec + 32);
    uint16_t m = read_u16(rec + 34);
    if (format == MK_SHOGI_FORMAT_HCPE) {
        out->move = m;
        uint8_t r = rec[36];
        if (r > 2) return MK_SHOGI_BAD_RESULT;
        out->result = r == 0 ? 0.5f : (r == 1) == (out->pos.side == 0) ? 1.0f : 0.0f;
    } else {
        int to = m & 127, from = m >> 7 & 127;
        if (m >> 14 & 1) out->move = (uint16_t)(to | (from >= 1 && from <= 7 ? 80 + from : 127) << 7);
        else out->move = (uint16_t)(to | from << 7 | (m >> 15 & 1) << 14);
        int8_t r = (int8_t)rec[38];
        if (r < -1 || r > 1) return MK_SHOGI_BAD_RESULT;
        out->result = r == 1 ? 1.0f : r == 0 ? 0.5f : 0.0f;
    }
    return MK_SHOGI_OK;
}

int mk_shogi_decode(int format, const uint8_t *rec, mk_shogi_record *out) {
    mk_shogi_boards B;
    int status = mk_shogi_decode_boards(format, rec, out, &B);
    /* the cells from the boards (those decoded so far on a fault, as the first version
     * left them), the side and hands as decoded */
    mk_shogi_pos pos = out->pos;
    mk_shogi_boards_position(&B, &pos);
    memcpy(out->pos.board, pos.board, sizeof pos.board);
    return status;
}

/* Square s = 9 (file - 1) + (rank - 1) with its file mirrored (file -> 10 - file). The same
 * map in the rotated frame of White's boards (80 - s mirrors to 80 - mirror(s)). */
static inline int mirror_square(int s) { return (8 - s / 9) * 9 + s % 9; }

/* The boards of the mirrored position (cells moved, bitboards and unions rebuilt). */
static void mirror_boards(mk_shogi_boards *B) {
    uint8_t cell[MK_SHOGI_SQUARES];
    memcpy(cell, B->cell, sizeof cell);
    memset(B->piece, 0, sizeof B->piece);
    for (int s = 0; s < MK_SHOGI_SQUARES; s++) {
        int m = mirror_square(s);
        B->cell[m] = cell[s];
        if (cell[s]) B->piece[cell[s]] |= (mk_shogi_bb)1 << m;
    }
    mk_shogi_boards_finish(B);
}

/* cshogi's move16 (to | from << 7 | promotion << 14; a drop's from is 81 + its piece) mirrored. */
static uint16_t mirror_move(uint16_t m) {
    int to = m & 127, from = m >> 7 & 127;
    if (to < MK_SHOGI_SQUARES) to = mirror_square(to);
    if (from < MK_SHOGI_SQUARES) from = mirror_square(from);
    return (uint16_t)((m & ~0x3fffu) | (unsigned)from << 7 | (unsigned)to);
}

int mk_shogi_row(int format, const uint8_t *rec, double eval_weight, double eval_scale, int mirror, int moves,
                 int32_t *tokens, int32_t *labels, int32_t *target, float *value) {
    mk_shogi_record r;
    mk_shogi_boards B; /* built once, by the decoder, for validation, moves and tokens */
    int status = mk_shogi_decode_boards(format, rec, &r, &B);
    if (status != MK_SHOGI_OK) return -status;
    if (mirror) {
        mirror_boards(&B);
        r.move = mirror_move(r.move);
    }
    int n = mk_shogi_legal_labels_boards(&r.pos, &B, r.move, labels, target);
    if (*target < 0) return -MK_SHOGI_ILLEGAL_MOVE;
    mk_shogi_encode_labels_boards(&B, moves, labels, n);
    mk_shogi_tokens_boards(&r.pos, &B, tokens);
    if (eval_weight == 0.0) {
        *value = r.result; /* what the formula below gives, without the exp */
    } else {
        double e = 1.0 / (1.0 + exp(-(double)r.eval / eval_scale));
        *value = (float)((1.0 - eval_weight) * r.result + eval_weight * e);
    }
    return n;
}

const char *mk_shogi_record_reason(int code) {
    switch (code) {
    case MK_SHOGI_BAD_CODE: return "the position's Huffman code is invalid";
    case MK_SHOGI_BAD_RESULT: return "the game result is out of range";
    case MK_SHOGI_ILLEGAL_MOVE: return "the recorded move is not legal in the position";
    case MK_SHOGI_NOT_FULL_SET: return "the position does not hold all 40 pieces (on the board or in hand)";
    default: return mk_shogi_reason(code);
    }
}
