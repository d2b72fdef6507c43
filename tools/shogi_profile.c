/* CPU time of each part of a shogi producer's work on HCPE records, one thread:
 * decode (with validation), legal moves, legal labels (moves, labels, sorted), tokens, and
 * mk_shogi_row (all of it, as the loader's producers call it).
 *
 *   gcc -O3 -march=native -std=c11 -fno-math-errno -pthread -Icsrc -o /tmp/shogi_profile \
 *       tools/shogi_profile.c csrc/shogi/position.c csrc/shogi/records.c -lm
 *   /tmp/shogi_profile games.hcpe [repeats [part]]
 *
 * `part` (1 moves, 2 labels, 3 tokens, 4 row) times that part alone after the decode pass,
 * e.g. under `valgrind --tool=callgrind` for instruction counts that a loaded machine does
 * not change. Records come from python -m manaka.bench pipeline --hcpe's generator
 * (manaka.bench.pipeline.random_hcpe) or your own files. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "shogi/records.h"

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.hcpe [repeats [part]]\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    int n = (int)(size / MK_HCPE_BYTES), reps = argc > 2 ? atoi(argv[2]) : 5, only = argc > 3 ? atoi(argv[3]) : -1;
    mk_shogi_record *recs = malloc(sizeof *recs * (size_t)(n ? n : 1));
    if (!buf || !recs || fread(buf, 1, (size_t)size, f) != (size_t)size || n == 0) {
        fprintf(stderr, "%s: cannot read records\n", argv[1]);
        return 1;
    }
    fclose(f);
    uint16_t moves[MK_SHOGI_MAX_MOVES];
    int32_t labels[MK_SHOGI_MAX_MOVES], tokens[2 * MK_SHOGI_TOKENS], target;
    float value;
    long sink = 0;
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        double t = cpu();
        for (int i = 0; i < n; i++) sink += mk_shogi_decode(MK_SHOGI_FORMAT_HCPE, buf + (long)MK_HCPE_BYTES * i, &recs[i]);
        t = cpu() - t;
        if (t < best[0]) best[0] = t;
        for (int part = 1; part <= 4; part++) {
            if (only >= 0 && only != part) continue;
            t = cpu();
            for (int i = 0; i < n; i++) {
                if (part == 1) sink += mk_shogi_legal_moves(&recs[i].pos, moves);
                else if (part == 2) sink += mk_shogi_legal_labels(&recs[i].pos, recs[i].move, labels, &target);
                else if (part == 3) mk_shogi_tokens(&recs[i].pos, tokens), sink += tokens[3];
                else sink += mk_shogi_row(MK_SHOGI_FORMAT_HCPE, buf + (long)MK_HCPE_BYTES * i, 0.0, tokens, labels,
                                          &target, &value);
            }
            t = cpu() - t;
            if (t < best[part]) best[part] = t;
        }
    }
    const char *what[5] = {"decode + validate", "legal moves", "legal labels (moves + labels)", "tokens",
                           "mk_shogi_row (all)"};
    for (int k = 0; k < 5; k++)
        if (best[k] < 1e30) printf("%-30s %7.3f us/position  %10.0f positions/CPU-s\n", what[k], 1e6 * best[k] / n, n / best[k]);
    printf("(%d records, best of %d; checksum %ld)\n", n, reps, sink);
    return 0;
}
