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

/* The 256 bits as four little-endian words plus a zero word, so that reading past the
 * end gives zeros (a code that runs past bit 256 is refused by the caller). */
typedef struct {
    uint64_t w[5];
    int bit; /* next bit, 0..256 */
} bits;

static void load_bits(bits *b, const uint8_t *data) {
    for (int i = 0; i < 4; i++) {
        uint64_t x = 0;
        for (int j = 7; j >= 0; j--) x = x << 8 | data[8 * i + j];
        b->w[i] = x;
    }
    b->w[4] = 0;
    b->bit = 0;
}

/* The next 8 bits, least significant first. */
static inline unsigned peek8(const bits *b) {
    int k = b->bit, o = k & 63;
    uint64_t v = b->w[k >> 6] >> o;
    if (o > 56) v |= b->w[(k >> 6) + 1] << (64 - o);
    return (unsigned)(v & 0xFF);
}

static inline unsigned take(bits *b, int n) {
    unsigned v = peek8(b) & ((1u << n) - 1);
    b->bit += n;
    return v;
}

static int decode_position(int format, const uint8_t *data, mk_shogi_pos *pos) {
    pthread_once(&table_once, build_tables);
    memset(pos, 0, sizeof *pos);
    bits b;
    load_bits(&b, data);
    pos->side = (uint8_t)take(&b, 1);
    unsigned king[2];
    king[0] = take(&b, 7);
    king[1] = take(&b, 7);
    if (king[0] >= 81 || king[1] >= 81 || king[0] == king[1]) return MK_SHOGI_BAD_KINGS;
    pos->board[king[0]] = MK_SHOGI_PIECE(0, MK_KING);
    pos->board[king[1]] = MK_SHOGI_PIECE(1, MK_KING);
    for (int i = 0; i < 81; i++) {
        /* PSV lists squares in SFEN order: rank a..i, within a rank file 9..1. */
        int s = i;
        if ((unsigned)s == king[0] || (unsigned)s == king[1]) continue;
        code_entry e = table[format][0][peek8(&b)];
        if (!e.len || b.bit + e.len > 256) return MK_SHOGI_BAD_CODE;
        b.bit += e.len;
        pos->board[s] = e.piece;
    }
    while (b.bit < 256) {
        code_entry e = table[format][1][peek8(&b)];
        if (!e.len || b.bit + e.len > 256) return MK_SHOGI_BAD_CODE;
        b.bit += e.len;
        int h = (e.piece & 15) - 1, color = e.piece >> 4;
        if (pos->hand[color][h] == 255) return MK_SHOGI_TOO_MANY;
        pos->hand[color][h]++;
    }
    return mk_shogi_validate(pos);
}

static uint16_t read_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

int mk_shogi_decode(int format, const uint8_t *rec, mk_shogi_record *out) {
    int status = decode_position(format, rec, &out->pos);
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

int mk_shogi_row(int format, const uint8_t *rec, double eval_weight, int32_t *tokens,
                 int32_t *labels, int32_t *target, float *value) {
    mk_shogi_record r;
    int status = mk_shogi_decode(format, rec, &r);
    if (status != MK_SHOGI_OK) return -status;
    int n = mk_shogi_legal_labels(&r.pos, r.move, labels, target);
    if (*target < 0) return -MK_SHOGI_ILLEGAL_MOVE;
    mk_shogi_tokens(&r.pos, tokens);
    double e = 1.0 / (1.0 + exp(-(double)r.eval / 756.0));
    *value = (float)((1.0 - eval_weight) * r.result + eval_weight * e);
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
