/* Python entry points of the shogi core (csrc/shogi/): manaka/shogi/ wraps them.
 *
 * A position crosses the boundary as (board: 81 bytes of cells, hand: 14 bytes, Black's
 * seven counts then White's, in the hand kind order P L N S B R G, side: 0 or 1), the
 * layout of mk_shogi_pos (csrc/shogi/position.h). Record arrays are [N, 38] (HCPE) or
 * [N, 40] (PSV) uint8, decoded with the GIL released. */
#include "python/common/binding.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "python/common/row_source_capsule.h"
#include "shogi/hcpe3.h"
#include "shogi/move_apply.h"
#include "shogi/record_game.h"
#include "shogi/records.h"

/* Reads the call's arguments (board, hand, side) into *pos, and after them what `format`
 * ("OOi" and "i", "|i" or nothing) says into *extra; 0, or -1 with an exception. */
static int position_args(PyObject *args, const char *format, mk_shogi_pos *pos, int *extra) {
    PyObject *board, *hand;
    int side;
    if (!PyArg_ParseTuple(args, format, &board, &hand, &side, extra)) return -1;
    Py_buffer b, h;
    if (PyObject_GetBuffer(board, &b, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(hand, &h, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&b);
        return -1;
    }
    int ok = b.len == 81 && h.len == 14;
    if (ok) {
        memcpy(pos->board, b.buf, 81);
        memcpy(pos->hand, h.buf, 14);
    }
    PyBuffer_Release(&b);
    PyBuffer_Release(&h);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "shogi: board must be 81 bytes and hand 14 bytes");
        return -1;
    }
    if (side != 0 && side != 1) {
        PyErr_Format(PyExc_ValueError, "shogi: side must be 0 (Black) or 1 (White), got %d", side);
        return -1;
    }
    pos->side = (uint8_t)side;
    return 0;
}

/* A move label encoding (MK_SHOGI_MOVES_*) or -1 with a ValueError. */
static int moves_arg(int moves) {
    if (mk_shogi_num_labels(moves) > 0) return moves;
    PyErr_Format(PyExc_ValueError, "shogi: unknown move label encoding %d", moves);
    return -1;
}

/* shogi_analyse(board, hand, side, moves=0) -> (status, moves int32 [n], labels int32 [n],
 * tokens int32 [2, 40]); moves in generation order, labels the moves' own in encoding
 * `moves` (MK_SHOGI_MOVES_*). A position that fails validation has status != 0 and no moves. */
static PyObject *py_analyse(PyObject *self, PyObject *args) {
    mk_shogi_pos pos;
    int encoding = MK_SHOGI_MOVES_DLSHOGI;
    if (position_args(args, "OOi|i", &pos, &encoding) < 0 || moves_arg(encoding) < 0) return NULL;
    int status = mk_shogi_validate(&pos);
    uint16_t moves[MK_SHOGI_MAX_MOVES];
    int32_t labels[MK_SHOGI_MAX_MOVES];
    int n = status == MK_SHOGI_OK ? mk_shogi_legal_moves_labels(&pos, moves, labels) : 0;
    /* The generator's own labels (what the producers use) must be mk_shogi_label's, which
     * decodes each move: every test and the oracle going through here check both. */
    for (int i = 0; i < n; i++)
        if (labels[i] != mk_shogi_label(moves[i], pos.side)) {
            PyErr_Format(PyExc_RuntimeError, "shogi_analyse: move %d has label %d from the generator but %d "
                         "from mk_shogi_label", (int)moves[i], (int)labels[i], mk_shogi_label(moves[i], pos.side));
            return NULL;
        }
    if (n > 0 && encoding != MK_SHOGI_MOVES_DLSHOGI) mk_shogi_legal_moves_encoded(&pos, encoding, moves, labels);
    npy_intp dn = n, dt[2] = {2, MK_SHOGI_TOKENS};
    PyObject *m = PyArray_SimpleNew(1, &dn, NPY_INT32), *l = PyArray_SimpleNew(1, &dn, NPY_INT32);
    PyObject *t = PyArray_SimpleNew(2, dt, NPY_INT32);
    if (!m || !l || !t) {
        Py_XDECREF(m), Py_XDECREF(l), Py_XDECREF(t);
        return NULL;
    }
    int32_t *mo = PyArray_DATA((PyArrayObject *)m), *lo = PyArray_DATA((PyArrayObject *)l);
    for (int i = 0; i < n; i++) mo[i] = moves[i], lo[i] = labels[i];
    mk_shogi_tokens(&pos, PyArray_DATA((PyArrayObject *)t));
    return Py_BuildValue("iNNN", status, m, l, t);
}

/* A C-contiguous uint8 [N, record_bytes] array of `format`'s records (new reference). */
static PyArrayObject *records_arg(PyObject *obj, int format) {
    int width = format == MK_SHOGI_FORMAT_HCPE ? MK_HCPE_BYTES : MK_PSV_BYTES;
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(
        obj, PyArray_DescrFromType(NPY_UINT8), 2, 2, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
    if (!a) return NULL;
    if (PyArray_DIM(a, 1) != width) {
        PyErr_Format(PyExc_ValueError, "shogi: records must be [N, %d] uint8, got [N, %lld]", width,
                     (long long)PyArray_DIM(a, 1));
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

static int format_arg(int format) {
    if (format == MK_SHOGI_FORMAT_HCPE || format == MK_SHOGI_FORMAT_PSV) return 0;
    PyErr_Format(PyExc_ValueError, "shogi: format must be 0 (HCPE) or 1 (PSV), got %d", format);
    return -1;
}

/* shogi_decode(format, records) -> (board uint8 [N, 81], hand uint8 [N, 2, 7], side uint8
 * [N], move uint16 [N] (cshogi's move16), eval int16 [N], result float32 [N], status int32
 * [N]). */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    int format;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "iO", &format, &obj) || format_arg(format) < 0) return NULL;
    PyArrayObject *rec = records_arg(obj, format);
    if (!rec) return NULL;
    npy_intp N = PyArray_DIM(rec, 0), db[2] = {N, 81}, dh[3] = {N, 2, 7};
    PyObject *out[7] = {PyArray_SimpleNew(2, db, NPY_UINT8), PyArray_SimpleNew(3, dh, NPY_UINT8),
                        PyArray_SimpleNew(1, &N, NPY_UINT8), PyArray_SimpleNew(1, &N, NPY_UINT16),
                        PyArray_SimpleNew(1, &N, NPY_INT16), PyArray_SimpleNew(1, &N, NPY_FLOAT32),
                        PyArray_SimpleNew(1, &N, NPY_INT32)};
    for (int i = 0; i < 7; i++)
        if (!out[i]) {
            for (int j = 0; j < 7; j++) Py_XDECREF(out[j]);
            Py_DECREF(rec);
            return NULL;
        }
#define D(i) PyArray_DATA((PyArrayObject *)out[i])
    Py_BEGIN_ALLOW_THREADS;
    mk_shogi_decode_all(format, PyArray_DATA(rec), N, D(0), D(1), D(2), D(3), D(4), D(5), D(6));
    Py_END_ALLOW_THREADS;
#undef D
    Py_DECREF(rec);
    return Py_BuildValue("NNNNNNN", out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
}

/* The eval's scale in a value target sigmoid(eval / eval_scale): positive and finite. */
static int eval_scale_arg(double eval_scale) {
    if (eval_scale > 0.0 && isfinite(eval_scale)) return 0;
    PyErr_Format(PyExc_ValueError, "shogi: eval_scale must be a positive finite number, got %g", eval_scale);
    return -1;
}

/* shogi_rows(format, records, eval_weight[, mirror[, moves[, eval_scale]]]) -> (tokens int16 [N, 2, 40],
 * offsets int64 [N + 1], labels [offsets[N]], target int32 [N], value float32 [N], status
 * int32 [N]): every record as a training row (legal labels in encoding `moves`, in
 * ascending dlshogi label, the played move's index); labels are int16 when the encoding's
 * fit (dlshogi), else int32. A bad record has status = its fault's code (records.h) and no
 * labels. */
static PyObject *py_rows(PyObject *self, PyObject *args) {
    int format;
    PyObject *obj;
    double eval_weight, eval_scale = 756.0;
    int mirror = 0, encoding = MK_SHOGI_MOVES_DLSHOGI;
    if (!PyArg_ParseTuple(args, "iOd|pid", &format, &obj, &eval_weight, &mirror, &encoding, &eval_scale) ||
        format_arg(format) < 0 || moves_arg(encoding) < 0 || eval_scale_arg(eval_scale) < 0)
        return NULL;
    if (!(eval_weight >= 0.0 && eval_weight <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "shogi: eval_weight must be in [0, 1], got %g", eval_weight);
        return NULL;
    }
    PyArrayObject *rec = records_arg(obj, format);
    if (!rec) return NULL;
    npy_intp N = PyArray_DIM(rec, 0), dt[3] = {N, 2, MK_SHOGI_TOKENS}, N1 = N + 1;
    PyObject *tok = PyArray_SimpleNew(3, dt, NPY_INT16), *off = PyArray_SimpleNew(1, &N1, NPY_INT64);
    PyObject *tgt = PyArray_SimpleNew(1, &N, NPY_INT32), *val = PyArray_SimpleNew(1, &N, NPY_FLOAT32);
    PyObject *sta = PyArray_SimpleNew(1, &N, NPY_INT32);
    int32_t *labels = NULL;
    size_t used = 0;
    int nomem = 0;
    if (!tok || !off || !tgt || !val || !sta) {
        Py_XDECREF(tok), Py_XDECREF(off), Py_XDECREF(tgt), Py_XDECREF(val), Py_XDECREF(sta);
        Py_DECREF(rec);
        return NULL;
    }
#define D(a) PyArray_DATA((PyArrayObject *)a)
    Py_BEGIN_ALLOW_THREADS;
    nomem = mk_shogi_rows_all(format, PyArray_DATA(rec), N, eval_weight, eval_scale, mirror, encoding, D(tok),
                              D(off), D(tgt), D(val), D(sta), &labels, &used) < 0;
    Py_END_ALLOW_THREADS;
#undef D
    Py_DECREF(rec);
    npy_intp nl = (npy_intp)used;
    int narrow = mk_shogi_num_labels(encoding) <= INT16_MAX + 1;
    PyObject *lab = nomem ? NULL : PyArray_SimpleNew(1, &nl, narrow ? NPY_INT16 : NPY_INT32);
    if (lab && narrow) {
        int16_t *l16 = PyArray_DATA((PyArrayObject *)lab);
        for (size_t k = 0; k < used; k++) l16[k] = (int16_t)labels[k];
    } else if (lab) {
        memcpy(PyArray_DATA((PyArrayObject *)lab), labels, used * sizeof *labels);
    }
    free(labels);
    if (!lab) {
        Py_DECREF(tok), Py_DECREF(off), Py_DECREF(tgt), Py_DECREF(val), Py_DECREF(sta);
        return nomem ? PyErr_NoMemory() : NULL;
    }
    return Py_BuildValue("NNNNNN", tok, off, lab, tgt, val, sta);
}

static PyObject *py_reason(PyObject *self, PyObject *args) {
    int code;
    if (!PyArg_ParseTuple(args, "i", &code)) return NULL;
    return PyUnicode_FromString(mk_shogi_record_reason(code));
}

/* shogi_encode_hcp(board, hand, side) -> bytes [32]: the position's HCPE Huffman code
 * (ValueError when it is not valid or not a full set of pieces). */
static PyObject *py_encode_hcp(PyObject *self, PyObject *args) {
    mk_shogi_pos pos;
    if (position_args(args, "OOi", &pos, NULL) < 0) return NULL;
    uint8_t hcp[32];
    int status = mk_shogi_encode_hcp(&pos, hcp);
    if (status != MK_SHOGI_OK) {
        PyErr_Format(PyExc_ValueError, "shogi: cannot encode the position: %s", mk_shogi_record_reason(status));
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)hcp, 32);
}

/* shogi_in_check(board, hand, side) -> bool for a valid position (ValueError if not). */
static PyObject *py_in_check(PyObject *self, PyObject *args) {
    mk_shogi_pos pos;
    if (position_args(args, "OOi", &pos, NULL) < 0) return NULL;
    int status = mk_shogi_validate(&pos);
    if (status != MK_SHOGI_OK) {
        PyErr_Format(PyExc_ValueError, "shogi: not a valid position: %s", mk_shogi_reason(status));
        return NULL;
    }
    return PyBool_FromLong(mk_shogi_in_check(&pos));
}

/* shogi_apply_move(board, hand, side, move) -> (board bytes [81], hand bytes [14], side,
 * in_check): the position after the legal move16 `move` and whether its side to move is
 * in check. ValueError when the position is not valid or the move not legal there. */
static PyObject *py_apply_move(PyObject *self, PyObject *args) {
    mk_shogi_pos pos;
    int move;
    if (position_args(args, "OOii", &pos, &move) < 0) return NULL;
    if (move < 0 || move > 0xFFFF) {
        PyErr_Format(PyExc_ValueError, "shogi: move must be a 16-bit move, got %d", move);
        return NULL;
    }
    int status = mk_shogi_apply_move(&pos, (uint16_t)move, &pos);
    if (status == MK_SHOGI_MOVE_NOT_LEGAL) {
        PyErr_Format(PyExc_ValueError, "shogi: move %d is not legal in this position", move);
        return NULL;
    }
    if (status != MK_SHOGI_OK) {
        PyErr_Format(PyExc_ValueError, "shogi: not a valid position: %s", mk_shogi_reason(status));
        return NULL;
    }
    return Py_BuildValue("y#y#iO", (const char *)pos.board, (Py_ssize_t)81, (const char *)pos.hand,
                         (Py_ssize_t)14, (int)pos.side, mk_shogi_in_check(&pos) ? Py_True : Py_False);
}

/* ---------------------------------------------------------------- the game of record files */

/* shogi_game(format, eval_weight, mirror=False, moves=0, soft=None, eval_scale=756) -> a MK_RECORD_GAME_CAPSULE
 * capsule (row_source_capsule.h) for _core.GameRecords: shogi's records as rows
 * (csrc/shogi/record_game.h), legal labels in encoding `moves` (position.h). soft: for HCPE
 * records indexed from hcpe3 files (manaka/shogi/hcpe3.py), a list of (raw uint8 [bytes],
 * info int64 [records]) per file of the GameRecords: the hcpe3 file's bytes and each
 * record's MoveInfo offset there, from which the producers make the soft policy target.
 * The capsule owns what the game reads and keeps the soft arrays alive. */
typedef struct {
    mk_record_game game; /* first: the capsule's pointer */
    mk_shogi_records records;
    const uint8_t **raw; /* soft targets: each file's hcpe3 bytes (NULL without) */
    const int64_t **info;
    int64_t *raw_size, *info_size;
    PyObject *soft; /* the (raw, info) arrays, kept alive */
} shogi_game;

static void game_free(PyObject *capsule) {
    shogi_game *g = PyCapsule_GetPointer(capsule, MK_RECORD_GAME_CAPSULE);
    free(g->raw);
    free(g->info);
    free(g->raw_size);
    free(g->info_size);
    Py_XDECREF(g->soft);
    free(g);
}

/* The soft targets' arrays (hcpe3), one (raw, info) pair per file: 0, or -1 with an exception. */
static int soft_arg(shogi_game *g, PyObject *soft) {
    Py_ssize_t n = PyList_GET_SIZE(soft);
    g->raw = calloc((size_t)n, sizeof *g->raw);
    g->info = calloc((size_t)n, sizeof *g->info);
    g->raw_size = calloc((size_t)n, sizeof *g->raw_size);
    g->info_size = calloc((size_t)n, sizeof *g->info_size);
    if (!g->raw || !g->info || !g->raw_size || !g->info_size) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(soft, i), *raw, *info;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_ValueError, "shogi_game: soft[%zd] must be a (raw, info) tuple", i);
            return -1;
        }
        raw = PyTuple_GET_ITEM(pair, 0), info = PyTuple_GET_ITEM(pair, 1);
        /* read in place by the producers: exactly these types, C-contiguous */
        if (!PyArray_Check(raw) || PyArray_TYPE((PyArrayObject *)raw) != NPY_UINT8 ||
            PyArray_NDIM((PyArrayObject *)raw) != 1 || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)raw) ||
            !PyArray_Check(info) || PyArray_TYPE((PyArrayObject *)info) != NPY_INT64 ||
            PyArray_NDIM((PyArrayObject *)info) != 1 || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)info)) {
            PyErr_Format(PyExc_ValueError, "shogi_game: soft[%zd] must be (uint8 [bytes], int64 [records]) "
                         "C-contiguous arrays", i);
            return -1;
        }
        g->raw[i] = PyArray_DATA((PyArrayObject *)raw);
        g->raw_size[i] = PyArray_DIM((PyArrayObject *)raw, 0);
        g->info[i] = PyArray_DATA((PyArrayObject *)info);
        g->info_size[i] = PyArray_DIM((PyArrayObject *)info, 0);
    }
    g->records.raw = g->raw, g->records.info = g->info;
    g->records.raw_size = g->raw_size, g->records.info_size = g->info_size;
    g->soft = Py_NewRef(soft);
    return 0;
}

static PyObject *py_game(PyObject *self, PyObject *args) {
    PyObject *soft = Py_None;
    int format, mirror = 0, encoding = MK_SHOGI_MOVES_DLSHOGI;
    double eval_weight, eval_scale = 756.0;
    if (!PyArg_ParseTuple(args, "id|piOd", &format, &eval_weight, &mirror, &encoding, &soft, &eval_scale) ||
        format_arg(format) < 0 || moves_arg(encoding) < 0 || eval_scale_arg(eval_scale) < 0)
        return NULL;
    if (!(eval_weight >= 0.0 && eval_weight <= 1.0))
        return PyErr_Format(PyExc_ValueError, "shogi: eval_weight must be in [0, 1], got %g", eval_weight);
    if (soft != Py_None && (format != MK_SHOGI_FORMAT_HCPE || !PyList_Check(soft)))
        return PyErr_Format(PyExc_ValueError, "shogi_game: soft must be a list of (raw, info) per HCPE file");
    if (soft != Py_None && mirror) /* the candidates' labels are the unmirrored position's */
        return PyErr_Format(PyExc_ValueError, "shogi_game: mirror is not supported with soft targets (hcpe3)");
    shogi_game *g = calloc(1, sizeof *g);
    if (!g) return PyErr_NoMemory();
    g->records = (mk_shogi_records){.format = format, .moves = encoding, .mirror = mirror,
                                    .eval_weight = eval_weight, .eval_scale = eval_scale};
    PyObject *capsule = PyCapsule_New(g, MK_RECORD_GAME_CAPSULE, game_free);
    if (!capsule) return free(g), NULL;
    if (soft != Py_None && soft_arg(g, soft) < 0) return Py_DECREF(capsule), NULL;
    g->game = mk_shogi_record_game(&g->records);
    return capsule;
}

static PyMethodDef shogi_methods[] = {
    {"shogi_analyse", py_analyse, METH_VARARGS,
     "shogi_analyse(board, hand, side, moves=0) -> (status, moves, labels, tokens)"},
    {"shogi_decode", py_decode, METH_VARARGS,
     "shogi_decode(format, records) -> (board, hand, side, move, eval, result, status)"},
    {"shogi_rows", py_rows, METH_VARARGS,
     "shogi_rows(format, records, eval_weight, mirror=False, moves=0, eval_scale=756) -> (tokens, offsets, labels, target, value, status)"},
    {"shogi_reason", py_reason, METH_VARARGS, "shogi_reason(code) -> str"},
    {"shogi_encode_hcp", py_encode_hcp, METH_VARARGS, "shogi_encode_hcp(board, hand, side) -> bytes"},
    {"shogi_in_check", py_in_check, METH_VARARGS, "shogi_in_check(board, hand, side) -> bool"},
    {"shogi_apply_move", py_apply_move, METH_VARARGS,
     "shogi_apply_move(board, hand, side, move) -> (board, hand, side, in_check)"},
    {"shogi_game", py_game, METH_VARARGS,
     "shogi_game(format, eval_weight, mirror=False, moves=0, soft=None, eval_scale=756) -> the game's capsule "
     "for _core.GameRecords"},
    {NULL, NULL, 0, NULL},
};

int mk_init_shogi(PyObject *module) { return PyModule_AddFunctions(module, shogi_methods); }
