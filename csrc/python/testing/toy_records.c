/* manaka._testing.toy_game: a second, trivial game for the record-file row source
 * (csrc/data/record_source.h), so that the tests feed the Loader rows of a game that is not
 * shogi and whose row function lives in another extension than _core: the game crosses as
 * a capsule to _core.GameRecords, its rows as a capsule to _core.Loader
 * (python/common/row_source_capsule.h).
 *
 * A record is its own row, TOY_RECORD_BYTES uint8: tokens [2 * TOY_T], the legal count n,
 * legal ids [TOY_K] (the first n count), the target's index, the value * 255, soft weights
 * [TOY_K]. Bad records: n = 0 (code 1), n > TOY_K (2), target >= n (3), with soft targets
 * weights of the n moves summing to 0 (4). Variant 1 (variants = 2) is the record with its
 * legal list reversed (target and weights with it). tests/data/test_loader_row_source.py holds
 * the NumPy reference. */
#include "testing.h"

#include <stdlib.h>

#include "data/record_source.h"
#include "python/common/row_source_capsule.h"

enum { TOY_T = 2, TOY_K = 6, TOY_RECORD_BYTES = 2 * TOY_T + 1 + TOY_K + 1 + 1 + TOY_K };

static int toy_row(const void *ctx, const uint8_t *rec, int file, int64_t index, int variant,
                   int32_t *tokens, int32_t *legal, int32_t *target, float *value, float *policy) {
    (void)ctx, (void)file, (void)index;
    const uint8_t *ids = rec + 2 * TOY_T + 1, *weights = ids + TOY_K + 2;
    int n = rec[2 * TOY_T], t = ids[TOY_K];
    if (n == 0) return -1;
    if (n > TOY_K) return -2;
    if (t >= n) return -3;
    for (int k = 0; k < 2 * TOY_T; k++) tokens[k] = rec[k];
    int sum = 0;
    for (int l = 0; l < n; l++) {
        int from = variant ? n - 1 - l : l;
        legal[l] = ids[from];
        sum += weights[from];
        if (policy) policy[l] = (float)weights[from];
    }
    if (policy && sum == 0) return -4;
    for (int l = 0; policy && l < n; l++) policy[l] /= (float)sum;
    *target = variant ? n - 1 - t : t;
    *value = (float)ids[TOY_K + 1] / 255.0f;
    return n;
}

static const char *toy_reason(const void *ctx, int code) {
    (void)ctx;
    static const char *const reasons[] = {"?", "no legal move", "too many legal moves",
                                          "the target is not a legal move", "the soft weights sum to 0"};
    return code >= 1 && code <= 4 ? reasons[code] : "?";
}

static const char *const toy_notes[2] = {"", " (reversed)"};

static void game_free(PyObject *capsule) { free(PyCapsule_GetPointer(capsule, MK_RECORD_GAME_CAPSULE)); }

/* toy_game(variants=1, soft=False) -> the game's capsule, for _core.GameRecords. */
static PyObject *py_toy_game(PyObject *self, PyObject *args) {
    int variants = 1, soft = 0;
    if (!PyArg_ParseTuple(args, "|ip", &variants, &soft)) return NULL;
    if (variants != 1 && variants != 2)
        return PyErr_Format(PyExc_ValueError, "toy_game: variants must be 1 or 2, got %d", variants);
    mk_record_game *game = malloc(sizeof *game);
    if (!game) return PyErr_NoMemory();
    *game = (mk_record_game){
        .name = "toy", .record_bytes = TOY_RECORD_BYTES, .variants = variants,
        .variant_notes = toy_notes, .tokens_per_side = TOY_T, .max_legal = TOY_K,
        .num_tokens = 256, .num_moves = 256, .soft = soft, .ctx = NULL,
        .row = toy_row, .reason = toy_reason,
    };
    PyObject *capsule = PyCapsule_New(game, MK_RECORD_GAME_CAPSULE, game_free);
    if (!capsule) free(game);
    return capsule;
}

static PyMethodDef toy_methods[] = {
    {"toy_game", py_toy_game, METH_VARARGS,
     "toy_game(variants=1, soft=False) -> a trivial game's capsule for _core.GameRecords"},
    {NULL, NULL, 0, NULL},
};

int mk_init_toy_records(PyObject *module) {
    if (PyModule_AddIntConstant(module, "TOY_RECORD_BYTES", TOY_RECORD_BYTES) < 0) return -1;
    return PyModule_AddFunctions(module, toy_methods);
}
