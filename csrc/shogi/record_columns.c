/* Many records at once, as NumPy-shaped columns (records.h: mk_shogi_decode_all,
 * mk_shogi_rows_all): what manaka.shogi reads a file of records into. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "records.h"

static int record_bytes(int format) { return format == MK_SHOGI_FORMAT_HCPE ? MK_HCPE_BYTES : MK_PSV_BYTES; }

void mk_shogi_decode_all(int format, const uint8_t *records, int64_t n, uint8_t *board,
                         uint8_t *hand, uint8_t *side, uint16_t *move, int16_t *eval,
                         float *result, int32_t *status) {
    const int width = record_bytes(format);
    for (int64_t i = 0; i < n; i++) {
        mk_shogi_record x;
        memset(&x, 0, sizeof x);
        status[i] = mk_shogi_decode(format, records + i * width, &x);
        memcpy(board + i * 81, x.pos.board, 81);
        memcpy(hand + i * 14, x.pos.hand, 14);
        side[i] = x.pos.side;
        move[i] = x.move;
        eval[i] = x.eval;
        result[i] = x.result;
    }
}

/* The label buffer: room for `need` labels, doubling from *cap (or taking `need` itself
 * when doubling is not enough: one record may bring up to MK_SHOGI_MAX_MOVES labels, more
 * than a small buffer's doubling). Every size is checked before it is multiplied. 0, or -1
 * when the size overflows or realloc fails (the old buffer is then still the caller's). */
static int reserve_labels(int32_t **labels, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t want = *cap <= SIZE_MAX / 2 ? *cap * 2 : SIZE_MAX;
    if (want < need) want = need;
    if (want > SIZE_MAX / sizeof **labels) return -1;
    int32_t *grown = realloc(*labels, want * sizeof **labels);
    if (!grown) return -1;
    *labels = grown, *cap = want;
    return 0;
}

int mk_shogi_rows_all(int format, const uint8_t *records, int64_t n, double eval_weight,
                      double eval_scale, int mirror, int moves, int16_t *tokens, int64_t *offsets, int32_t *target,
                      float *value, int32_t *status, int32_t **labels, size_t *count) {
    const int width = record_bytes(format);
    /* A first guess of 128 labels per record (real games average fewer), grown as needed. */
    size_t cap = (size_t)(n > 0 ? n : 1), used = 0;
    cap = cap <= SIZE_MAX / (128 * sizeof(int32_t)) ? cap * 128 : MK_SHOGI_MAX_MOVES;
    if (!(*labels = malloc(cap * sizeof **labels))) return -1;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t t32[2 * MK_SHOGI_TOKENS], lab[MK_SHOGI_MAX_MOVES], row_target = -1;
        float row_value = 0;
        int k = mk_shogi_row(format, records + i * width, eval_weight, eval_scale, mirror, moves, t32, lab,
                             &row_target, &row_value);
        status[i] = k < 0 ? -k : 0;
        if (k < 0) { /* a bad record: no labels, every token slot empty */
            k = 0;
            for (int t = 0; t < 2 * MK_SHOGI_TOKENS; t++) t32[t] = -1;
            row_target = -1, row_value = 0;
        }
        if (reserve_labels(labels, &cap, used + (size_t)k) < 0) {
            free(*labels);
            *labels = NULL;
            return -1;
        }
        memcpy(*labels + used, lab, (size_t)k * sizeof *lab);
        used += (size_t)k;
        offsets[i + 1] = (int64_t)used;
        for (int t = 0; t < 2 * MK_SHOGI_TOKENS; t++)
            tokens[i * 2 * MK_SHOGI_TOKENS + t] = (int16_t)t32[t];
        target[i] = row_target;
        value[i] = row_value;
    }
    *count = used;
    return 0;
}
