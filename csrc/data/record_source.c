/* A game's record files as a row source: see record_source.h. */
#define _GNU_SOURCE /* strdup, O_CLOEXEC under -std=c11 */
#include "record_source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void mk_record_locate(const mk_record_files *rf, int64_t row, int *file, int64_t *index,
                      int *variant) {
    int64_t R = rf->start[rf->num_files];
    int v = 0;
    if (rf->game.variants > 1) {
        v = (int)(row / R);
        row -= v * R;
    }
    int lo = 0, hi = rf->num_files - 1; /* the last file whose first record is <= row */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (rf->start[mid] <= row) lo = mid;
        else hi = mid - 1;
    }
    *file = lo, *index = row - rf->start[lo], *variant = v;
}

static const uint8_t *record_at(const mk_record_files *rf, int file, int64_t index) {
    return rf->data[file] + index * rf->game.record_bytes;
}

/* Asks for the row's record (a few cache lines at most) ahead of its fill. */
static void record_prefetch(const void *ctx, int64_t row) {
    const mk_record_files *rf = ctx;
    int f, v;
    int64_t i;
    mk_record_locate(rf, row, &f, &i, &v);
    const uint8_t *rec = record_at(rf, f, i);
    for (int64_t k = 0; k < rf->game.record_bytes; k += 64) __builtin_prefetch(rec + k);
    __builtin_prefetch(rec + rf->game.record_bytes - 1);
}

static int record_fill(const void *ctx, int64_t row, int32_t *tokens, int32_t *legal,
                       int32_t *target, float *value, float *policy, char *error) {
    const mk_record_files *rf = ctx;
    const mk_record_game *g = &rf->game;
    int f, v;
    int64_t i;
    mk_record_locate(rf, row, &f, &i, &v);
    int n = g->row(g->ctx, record_at(rf, f, i), f, i, v, tokens, legal, target, value,
                   g->soft ? policy : NULL);
    if (n > 0) return n;
    if (rf->skip) return 0;
    snprintf(error, MK_ROW_ERROR_BYTES, "%s: %s: record %lld%s: %s (on_bad='skip' leaves such records out)",
             g->name, rf->names[f], (long long)i, g->variant_notes ? g->variant_notes[v] : "",
             g->reason(g->ctx, -n));
    return -1;
}

mk_row_source mk_record_row_source(const mk_record_files *rf) {
    const mk_record_game *g = &rf->game;
    return (mk_row_source){
        .num_rows = rf->start[rf->num_files] * g->variants,
        .tokens_per_side = g->tokens_per_side,
        .max_legal = g->max_legal,
        .num_tokens = g->num_tokens,
        .num_moves = g->num_moves,
        .ctx = rf,
        .fill = record_fill,
        .prefetch = record_prefetch,
        .soft = g->soft,
    };
}

void mk_record_files_free(mk_record_files *rf) {
    for (int f = 0; rf->names && f < rf->num_files; f++) free(rf->names[f]);
    free(rf->names);
    free(rf->data);
    free(rf->start);
    memset(rf, 0, sizeof *rf);
}

mk_status mk_record_files_init(mk_record_files *rf, const mk_record_game *game, int num_files,
                               const uint8_t *const *data, const int64_t *records,
                               const char *const *names, int skip) {
    memset(rf, 0, sizeof *rf);
    if (game->record_bytes < 1 || game->variants < 1 || game->tokens_per_side < 1 ||
        game->max_legal < 1 || !game->row || !game->reason || !game->name)
        return mk_fail(MK_ERR_VALUE, "record files: the game's descriptor is incomplete");
    if (num_files < 1) return mk_fail(MK_ERR_VALUE, "record files: no file");
    rf->data = calloc((size_t)num_files, sizeof *rf->data);
    rf->start = calloc((size_t)num_files + 1, sizeof *rf->start);
    rf->names = calloc((size_t)num_files, sizeof *rf->names);
    if (!rf->data || !rf->start || !rf->names) {
        mk_record_files_free(rf);
        return mk_fail(MK_ERR_NOMEM, "record files: out of memory for %d files", num_files);
    }
    rf->num_files = num_files;
    for (int f = 0; f < num_files; f++) {
        if (records[f] < 0 || records[f] > (INT64_MAX / game->variants - rf->start[f])) {
            mk_record_files_free(rf);
            return mk_fail(MK_ERR_VALUE, "record files: file %d: %lld records is out of range", f,
                           (long long)records[f]);
        }
        rf->data[f] = data[f];
        rf->start[f + 1] = rf->start[f] + records[f];
        rf->names[f] = strdup(names[f]);
        if (!rf->names[f]) {
            mk_record_files_free(rf);
            return mk_fail(MK_ERR_NOMEM, "record files: out of memory");
        }
    }
    rf->game = *game;
    rf->skip = skip;
    return MK_OK;
}

int mk_map_records(const char *path, int64_t record_bytes, mk_record_map *map) {
    memset(map, 0, sizeof *map);
    struct stat st;
    int err = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        err = errno;
    } else if (!S_ISREG(st.st_mode)) {
        err = -1;
    } else {
        map->size = (int64_t)st.st_size;
        map->len = (size_t)(st.st_size / record_bytes) * (size_t)record_bytes;
        if (map->len) {
            map->addr = mmap(NULL, map->len, PROT_READ, MAP_SHARED, fd, 0);
            if (map->addr == MAP_FAILED) {
                err = errno;
                map->addr = NULL, map->len = 0;
            }
        }
    }
    if (fd >= 0) close(fd);
    return err;
}

void mk_unmap_records(mk_record_map *map) {
    if (map->addr) munmap(map->addr, map->len);
    memset(map, 0, sizeof *map);
}
