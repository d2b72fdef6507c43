/* CPU time of each part of a shogi producer's work on HCPE records, one thread, as
 * mk_shogi_row does it: decode (into the side to move's bitboards, with validation), the
 * sorted legal labels and the played move's index, the tokens, and mk_shogi_row (all of
 * it, as the loader's producers call it); then the public move list (mk_shogi_legal_moves,
 * what shogi_analyse and the notebook helpers use).
 *
 *   gcc -O3 -march=native -std=c11 -fno-math-errno -pthread -Icsrc -o /tmp/shogi_profile \
 *       tools/shogi_profile.c csrc/shogi/position.c csrc/shogi/records.c -lm
 *   /tmp/shogi_profile games.hcpe [repeats [part]]
 *
 * `part` (1 labels, 2 tokens, 3 row, 4 public move list; 9 none) times that part alone
 * after the decode pass, e.g. under `valgrind --tool=callgrind` for instruction counts that
 * a loaded machine does not change (valgrind knows no AVX-512: build with
 * -march=x86-64-v3 there); a part's count is its run's total less the run with part 9,
 * over the number of records. Records come from python -m manaka.bench pipeline --hcpe's
 * generator (manaka.bench.pipeline.random_hcpe) or your own files. */
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
    mk_shogi_boards *boards = malloc(sizeof *boards * (size_t)(n ? n : 1));
    if (!buf || !recs || !boards || fread(buf, 1, (size_t)size, f) != (size_t)size || n == 0) {
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
        for (int i = 0; i < n; i++)
            sink += mk_shogi_decode_boards(MK_SHOGI_FORMAT_HCPE, buf + (long)MK_HCPE_BYTES * i, &recs[i], &boards[i]);
        t = cpu() - t;
        if (t < best[0]) best[0] = t;
        for (int part = 1; part <= 4; part++) {
            if (only >= 0 && only != part) continue;
            t = cpu();
            for (int i = 0; i < n; i++) {
                if (part == 1) {
                    sink += mk_shogi_legal_labels_boards(&recs[i].pos, &boards[i], recs[i].move, labels, &target);
                } else if (part == 2) {
                    mk_shogi_tokens_boards(&recs[i].pos, &boards[i], tokens), sink += tokens[3];
                } else if (part == 3) {
                    sink += mk_shogi_row(MK_SHOGI_FORMAT_HCPE, buf + (long)MK_HCPE_BYTES * i, 0.0, 756.0, 0, 0, tokens, labels,
                                         &target, &value);
                } else {
                    mk_shogi_pos pos;
                    mk_shogi_boards_position(&boards[i], &pos);
                    sink += mk_shogi_legal_moves(&pos, moves);
                }
            }
            t = cpu() - t;
            if (t < best[part]) best[part] = t;
        }
    }
    const char *what[5] = {"decode + validate", "legal labels + target", "tokens", "mk_shogi_row (all)",
                           "public move list"};
    for (int k = 0; k < 5; k++)
        if (best[k] < 1e30) printf("%-30s %7.3f us/position  %10.0f positions/CPU-s\n", what[k], 1e6 * best[k] / n, n / best[k]);
    printf("(%d records, best of %d; checksum %ld)\n", n, reps, sink);
    return 0;
}
