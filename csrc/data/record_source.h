/* A game's record files as a row source (loader.h): fixed-width records in one or more
 * files (usually memory-mapped, mk_map_records), each turned into a training row by the
 * game's row function on the producers' threads.
 *
 * What is the same for every game lives here once: which file and record a row is, the
 * bounds of each file, the prefetch of a record ahead of its row, a bad record left out
 * (skip) or named in the error by its file and index, and the mapping of a file. What a
 * record means is the game's (mk_record_game): csrc/shogi/record_game.c is one. */
#ifndef MANAKA_RECORD_SOURCE_H
#define MANAKA_RECORD_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "loader.h"

/* A game's part. Rows: with R records in all, row v * R + r is variant v of record r
 * (variants >= 1: a game's augmentations, shogi's left-right mirror). */
typedef struct {
    const char *name;                 /* a bad record's message starts with it ("shogi") */
    int64_t record_bytes;             /* >= 1 */
    int variants;                     /* >= 1 */
    const char *const *variant_notes; /* [variants] or NULL: what follows a bad record's
                                         index in its message (" (mirrored)") */
    int64_t tokens_per_side, max_legal;
    int64_t num_tokens, num_moves;    /* the ids row makes are below these */
    int soft;                         /* 1: row writes the soft targets of its legal ids */
    const void *ctx;
    /* Variant `variant` of `record` (record `index` of file `file`) as fill's row (loader.h:
     * tokens, at most max_legal legal ids, target, value, and with `soft` the policy target
     * when `policy` is not NULL): the legal count (>= 1), or -code for a bad record. Runs on
     * several threads at once. */
    int (*row)(const void *ctx, const uint8_t *record, int file, int64_t index, int variant,
               int32_t *tokens, int32_t *legal, int32_t *target, float *value, float *policy);
    const char *(*reason)(const void *ctx, int code); /* a bad record's code in words */
} mk_record_game;

typedef struct {
    mk_record_game game;
    int num_files;
    const uint8_t **data; /* [num_files] each file's first record */
    int64_t *start;       /* [num_files + 1] each file's first record among all, then R */
    char **names;         /* [num_files] the files' names, for messages */
    int skip;             /* 1: a bad record's row is left out (loader stats' skipped) */
} mk_record_files;

/* Files `data[f]` of `records[f]` records each (>= 0), named names[f]; copies the names
 * and the game's descriptor (whose ctx must outlive `files`). MK_OK, MK_ERR_VALUE (a bad
 * game descriptor, no file, or more rows than an int64 holds), MK_ERR_NOMEM. */
mk_status mk_record_files_init(mk_record_files *files, const mk_record_game *game, int num_files,
                               const uint8_t *const *data, const int64_t *records,
                               const char *const *names, int skip);
/* Frees what init allocated; a zeroed or freed `files` is fine. */
void mk_record_files_free(mk_record_files *files);

/* The row source over `files` (which must stay where it is while the source is used):
 * num_rows = variants * R, and the game's shapes, vocabularies and soft flag. A bad record
 * is left out with skip, else an error naming the file and the record:
 * "<name>: <file>: record <index><note>: <reason> (on_bad='skip' leaves such records out)". */
mk_row_source mk_record_row_source(const mk_record_files *files);

/* Where row `row` comes from: its file, its record's index there, its variant. */
void mk_record_locate(const mk_record_files *files, int64_t row, int *file, int64_t *index,
                      int *variant);

/* A file's whole records mapped read-only: len = floor(size / record_bytes) * record_bytes
 * bytes at addr (NULL when len is 0), size the file's size. No descriptor is kept (a map
 * needs none), so any number of files can be mapped at once. Returns 0, an errno value
 * (open, fstat or mmap failed), or -1 when the path is not a regular file. */
typedef struct {
    void *addr;
    size_t len;
    int64_t size;
} mk_record_map;
int mk_map_records(const char *path, int64_t record_bytes, mk_record_map *map);
void mk_unmap_records(mk_record_map *map);

#endif
