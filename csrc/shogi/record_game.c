/* Shogi records as rows of a record-file source: see record_game.h. */
#include "record_game.h"

#include "hcpe3.h"
#include "records.h"

static const char *const mirror_notes[2] = {"", " (mirrored)"};

static int shogi_row(const void *ctx, const uint8_t *rec, int file, int64_t index, int variant,
                     int32_t *tokens, int32_t *legal, int32_t *target, float *value, float *policy) {
    const mk_shogi_records *g = ctx;
    int n = mk_shogi_row(g->format, rec, g->eval_weight, g->eval_scale, variant, g->moves, tokens, legal, target, value);
    if (n > 0 && g->raw && policy) { /* bit 0 of the Huffman code: the side to move (never mirrored) */
        int64_t at = index < g->info_size[file] ? g->info[file][index] : -1;
        int64_t size = g->raw_size[file];
        int code = at >= 0 && at < size
                       ? mk_hcpe3_policy(g->raw[file] + at, size - at, rec[0] & 1, legal, n, policy)
                       : MK_HCPE3_CUT_SHORT;
        if (code != MK_SHOGI_OK) n = -code;
    }
    return n;
}

static const char *shogi_reason(const void *ctx, int code) {
    const mk_shogi_records *g = ctx;
    return g->raw ? mk_hcpe3_reason(code) : mk_shogi_record_reason(code);
}

mk_record_game mk_shogi_record_game(const mk_shogi_records *g) {
    return (mk_record_game){
        .name = "shogi",
        .record_bytes = g->format == MK_SHOGI_FORMAT_HCPE ? MK_HCPE_BYTES : MK_PSV_BYTES,
        .variants = g->mirror ? 2 : 1,
        .variant_notes = mirror_notes,
        .tokens_per_side = MK_SHOGI_TOKENS,
        .max_legal = MK_SHOGI_MAX_MOVES,
        /* the encoder's ids: a batch the producers pack from records is checked against them */
        .num_tokens = MK_SHOGI_NUM_TOKENS,
        .num_moves = mk_shogi_num_labels(g->moves),
        .soft = g->raw != NULL,
        .ctx = g,
        .row = shogi_row,
        .reason = shogi_reason,
    };
}
