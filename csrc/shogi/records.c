/* HCPE and PSV decoding: see records.h.
 *
 * Both positions are the same kind of Huffman code, read least significant bit first:
 * 1 bit side to move, 7 bits each for the Black and the White king's square, one code per
 * other square (a single 0 bit when empty), then one code per piece in hand until 256 bits
 * are read. A board code is an occupancy 1, the kind's code, then (except for gold) a
 * promotion bit and a colour bit; a hand code is the kind's code, a 0 and the colour.
 * The two formats differ in three details, which `style` below holds: Apery (HCPE) swaps
 * the knight's and the silver's codes and puts the colour bit before the promotion bit,
 * and YaneuraOu (PSV) lists the squares in SFEN order (rank a to i, file 9 to 1) instead
 * of square order. */
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
    uint8_t piece; /* board: cell value (0 empty); hand: 1 + hand kind + 16 * color */
} code_entry;

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
        }
    }
}

/* The 256 bits as four little-endian words plus zero words, so that reading past the end
 * gives zeros (a code that runs past bit 256 is refused). */
typedef struct {
    uint64_t w[6];
} bits;

static void load_bits(bits *b, const uint8_t *data) {
    memcpy(b->w, data, 32);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (int i = 0; i < 4; i++) b->w[i] = __builtin_bswap64(b->w[i]);
#endif
    b->w[4] = b->w[5] = 0;
}

/* The 64 bits from bit k on (k <= 256), least significant first. */
static inline uint64_t peek64(const bits *b, int k) {
    int i = k >> 6;
    return (uint64_t)((((mk_shogi_bb)b->w[i + 1] << 64) | b->w[i]) >> (k & 63));
}

/* Decodes the position into its bitboards, and its side to move and hands into pos (not
 * its cells: the boards hold them). The board's squares are read a code at
 * a time, except that a run of empty squares (a run of 0 bits) is skipped at once: the run
 * is the count of trailing zeros, cut at the next king square (which has no code). */
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
    /* The boards are in the side to move's frame (position.h): square s there is
     * (s ^ neg) - neg + mirror, i.e. 80 - s when White is to move, and a piece's colour
     * bit is flipped with pflip. */
    int flip = pos->side, neg = -flip, mirror = 80 * flip;
    unsigned pflip = (unsigned)flip << 4;
    for (int c = 0; c < 2; c++) {
        int t = ((king[c] ^ neg) - neg) + mirror;
        uint8_t p = MK_SHOGI_PIECE(c, MK_KING);
        B->cell[t] = (uint8_t)(p ^ pflip);
        B->piece[p ^ pflip] = (mk_shogi_bb)1 << t;
    }
    /* The squares with a code: three segments around the kings' squares. */
    int lo = king[0] < king[1] ? king[0] : king[1], hi = king[0] ^ king[1] ^ lo;
    int seg_start[3] = {0, lo + 1, hi + 1}, seg_end[3] = {lo, hi, 81};
    const code_entry *board_code = table[format][0];
    uint64_t(*words)[2] = B->piece_words;
    /* Each step reads the bits from `bit` on: a run of 0 bits (empty squares, cut at the
     * segment's end, as the next square of the next segment has a code again), then the
     * code of the piece that ends it. A code or a run that ends past bit 256 is refused
     * (the bits past 256 read as zeros). */
    int bit = 15;
    for (int g = 0; g < 3; g++) {
        int s = seg_start[g], end = seg_end[g];
        while (s < end) {
            uint64_t x = peek64(&b, bit);
            int run = x ? __builtin_ctzll(x) : 64;
            if (run >= end - s) { /* the segment's other squares are empty */
                bit += end - s;
                break;
            }
            if (run > 56) { /* too few bits left in x for a code: read again */
                bit += run;
                s += run;
                if (bit > 256) return MK_SHOGI_BAD_CODE;
                continue;
            }
            bit += run;
            s += run;
            code_entry e = board_code[(x >> run) & 255];
            if (!e.len) return MK_SHOGI_BAD_CODE;
            bit += e.len;
            int t = ((s ^ neg) - neg) + mirror;
            unsigned p = e.piece ^ pflip;
            B->cell[t] = (uint8_t)p;
            words[p][MK_SHOGI_WORD(t)] |= 1ull << (t & 63);
            s++;
        }
        if (bit > 256) return MK_SHOGI_BAD_CODE;
    }
    const code_entry *hand_code = table[format][1];
    while (bit < 256) {
        code_entry e = hand_code[peek64(&b, bit) & 255];
        if (!e.len || bit + e.len > 256) return MK_SHOGI_BAD_CODE;
        bit += e.len;
        int h = (e.piece & 15) - 1, color = e.piece >> 4;
        if (pos->hand[color][h] == 255) return MK_SHOGI_TOO_MANY;
        pos->hand[color][h]++;
    }
    memcpy(B->hand[0], pos->hand[flip], MK_SHOGI_HAND_KINDS);
    memcpy(B->hand[1], pos->hand[1 - flip], MK_SHOGI_HAND_KINDS);
    mk_shogi_boards_finish(B);
    return mk_shogi_validate_boards(pos, B);
}

static uint16_t read_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* A record into out (whose position's cells are left alone: the boards hold them). */
static int decode_record(int format, const uint8_t *rec, mk_shogi_record *out, mk_shogi_boards *B) {
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
    int status = decode_record(format, rec, out, &B);
    /* the cells from the boards (those decoded so far on a fault, as the first version
     * left them), the side and hands as decoded */
    mk_shogi_pos pos = out->pos;
    mk_shogi_boards_position(&B, &pos);
    memcpy(out->pos.board, pos.board, sizeof pos.board);
    return status;
}

int mk_shogi_row(int format, const uint8_t *rec, double eval_weight, int32_t *tokens,
                 int32_t *labels, int32_t *target, float *value) {
    mk_shogi_record r;
    mk_shogi_boards B; /* built once, by the decoder, for validation, moves and tokens */
    int status = decode_record(format, rec, &r, &B);
    if (status != MK_SHOGI_OK) return -status;
    int n = mk_shogi_legal_labels_boards(&r.pos, &B, r.move, labels, target);
    if (*target < 0) return -MK_SHOGI_ILLEGAL_MOVE;
    mk_shogi_tokens_boards(&r.pos, &B, tokens);
    if (eval_weight == 0.0) {
        *value = r.result; /* what the formula below gives, without the exp */
    } else {
        double e = 1.0 / (1.0 + exp(-(double)r.eval / 756.0));
        *value = (float)((1.0 - eval_weight) * r.result + eval_weight * e);
    }
    return n;
}

const char *mk_shogi_record_reason(int code) {
    switch (code) {
    case MK_SHOGI_BAD_CODE: return "the position's Huffman code is invalid";
    case MK_SHOGI_BAD_RESULT: return "the game result is out of range";
    case MK_SHOGI_ILLEGAL_MOVE: return "the recorded move is not legal in the position";
    default: return mk_shogi_reason(code);
    }
}
