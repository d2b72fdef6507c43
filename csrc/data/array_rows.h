/* A dataset's arrays (mk_dataset_view, loader.h) as a row source, so that the loader has
 * one packer for arrays and for rows its producers make (decoded game records).
 *
 * Row p is position p: its tokens widened to int32, its legal ids from legal_offsets
 * (int16 widened), its target, value and, when the arrays have them, soft targets. The
 * arrays are usually memory maps of files another process may rewrite while the loader
 * runs: the loader's create() checked every offset, but fill reads a position's two
 * offsets from the map exactly once and checks them again (0 <= start <= end <=
 * total_moves, 1 <= end - start <= max_count) before it copies anything; a changed offset
 * is an error for the consumer, naming the position (changed ids or targets are data, which
 * the batch check refuses if invalid). */
#ifndef MANAKA_ARRAY_ROWS_H
#define MANAKA_ARRAY_ROWS_H

#include "loader.h"

typedef struct {
    mk_dataset_view view; /* the arrays (view.source unused) */
    int64_t max_count;    /* the longest list create() found: fill never writes more */
} mk_array_rows;

/* The row source over `rows`, which must stay where it is while the source is used. */
mk_row_source mk_array_row_source(const mk_array_rows *rows);

#endif
