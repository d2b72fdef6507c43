/* Stress harness for csrc/data/loader.c under ThreadSanitizer / AddressSanitizer (tests/robustness/test_loader_sanitizers.py):
 * 6 producers, a queue of 2, 30 epochs, some stopped early; then 4 threads stopping the
 * loader while the consumer restarts and reads it (stop works from any thread, and
 * concurrent stops join each producer once). Every batch must come checked by its producer
 * (the data is valid for num_tokens 300, num_moves 1000). Prints "ok <sum of positions>". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "data/loader.h"

static void *stopper(void *arg) {
    for (int i = 0; i < 200; i++) mk_loader_stop(arg);
    return NULL;
}

int main(void) {
    int64_t N = 5000, T = 4;
    int16_t *tok = malloc(N * 2 * T * 2);
    int64_t *off = malloc((N + 1) * 8);
    off[0] = 0;
    for (int64_t i = 0; i < N; i++) off[i + 1] = off[i] + 1 + i % 17;
    int16_t *mv = malloc(off[N] * 2);
    for (int64_t i = 0; i < off[N]; i++) mv[i] = i % 1000;
    for (int64_t i = 0; i < N * 2 * T; i++) tok[i] = i % 300;
    int32_t *tg = calloc(N, 4);
    float *v = calloc(N, 4);
    mk_dataset_view d = {.num_positions = N, .tokens_per_side = T, .tokens = tok, .legal_offsets = off,
                         .legal_moves = mv, .total_moves = off[N], .moves_itemsize = 2, .target = tg,
                         .value = v, .num_tokens = 300, .num_moves = 1000};
    mk_loader_config c = {.batch_size = 13, .producers = 6, .prefetch = 2, .shuffle = 1, .seed = 3};
    mk_loader *ld;
    if (mk_loader_create(&d, &c, &ld)) { printf("%s\n", mk_error()); return 1; }
    long long sum = 0;
    for (int e = 0; e < 30; e++) {
        mk_loader_start(ld, e, 0);
        int stopped_early = (e % 5 == 4);
        for (int k = 0;; k++) {
            const mk_loader_batch *b; int end;
            mk_loader_next(ld, 0.05, &b, &end);
            if (end) break;
            if (!b) continue;
            if (b->batch.checked_V != 300 || b->batch.checked_M != 1000) {
                printf("batch %lld of epoch %d was not checked by its producer\n", (long long)b->index, e);
                return 1;
            }
            for (int64_t i = 0; i < b->batch.B; i++) sum += b->positions[i];
            if (stopped_early && k == 20) break;
        }
        mk_loader_stop(ld);
    }
    pthread_t stoppers[4];
    for (int i = 0; i < 4; i++) pthread_create(&stoppers[i], NULL, stopper, ld);
    for (int round = 0; round < 50; round++) {
        mk_loader_start(ld, round, 0);
        for (int k = 0; k < 30; k++) { /* ends at a stop (an error) or after 30 waits */
            const mk_loader_batch *b; int end;
            if (mk_loader_next(ld, 0.01, &b, &end) != MK_OK || end) break;
            if (b) sum += b->batch.B > 0 ? 0 : 1;
        }
    }
    for (int i = 0; i < 4; i++) pthread_join(stoppers[i], NULL);
    mk_loader_destroy(ld);
    free(tok), free(off), free(mv), free(tg), free(v);
    printf("ok %lld\n", sum);
    return 0;
}
