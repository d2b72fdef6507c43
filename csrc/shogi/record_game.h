/* Shogi as a game of record files (csrc/data/record_source.h): how an HCPE or PSV record,
 * or an HCPE record indexed from an hcpe3 file with its candidates, becomes a training row.
 *
 * A row is mk_shogi_row's (records.h): the tokens, the legal labels in encoding `moves`,
 * the played move's index and the value mixed by eval_weight (eval scaled by eval_scale). Variant 1 (with mirror) is
 * the record's left-right mirror. With hcpe3 soft targets (raw set), the policy target of
 * a row is mk_hcpe3_policy's over the candidates whose MoveInfo is at info[file][index] in
 * raw[file] (of raw_size[file] bytes); mirroring is not offered then (the candidates'
 * labels are the unmirrored position's). */
#ifndef MANAKA_SHOGI_RECORD_GAME_H
#define MANAKA_SHOGI_RECORD_GAME_H

#include "data/record_source.h"

typedef struct {
    int format;          /* MK_SHOGI_FORMAT_HCPE or _PSV (records.h) */
    int moves;           /* the label encoding, MK_SHOGI_MOVES_* (position.h) */
    int mirror;          /* 1: two variants, the record and its mirror */
    double eval_weight;  /* in [0, 1] */
    double eval_scale;   /* > 0: the value's sigmoid(eval / eval_scale) */
    const uint8_t *const *raw;  /* [files] each hcpe3 file's bytes, or NULL: no soft targets */
    const int64_t *const *info; /* [files][info_size[file]] each record's MoveInfo offset in
                                   raw; a record past its file's info has no candidates */
    const int64_t *raw_size, *info_size; /* [files] */
} mk_shogi_records;

/* The game descriptor of `records` (its ctx: records itself, which must outlive it). */
mk_record_game mk_shogi_record_game(const mk_shogi_records *records);

#endif
