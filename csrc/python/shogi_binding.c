/* Python entry points of the shogi core (csrc/shogi/): manaka/shogi/ wraps them.
 *
 * A position crosses the boundary as (board: 81 bytes of cells, hand: 14 bytes, Black's
 * seven counts then White's, in the hand kind order P L N S B R G, side: 0 or 1), the
 * layout of mk_shogi_pos (csrc/shogi/position.h). Record arrays are [N, 38] (HCPE) or
 * [N, 40] (PSV) uint8, decoded with the GIL released. */
#include "binding.h"

#include <stdlib.h>
#include <string.h>

#include "../shogi/records.h"

/* Reads (board, hand, side) into *pos; 0, or -1 with an exception. */
static int position_arg(PyObject *board, PyObject *hand, int side, mk_shogi_pos *pos) {
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

static PyObject *new_array(int ndim, npy_intp *dims, int type) {
    return PyArray_SimpleNew(ndim, dims, type);
}

/* shogi_analyse(board, hand, side) -> (status, moves int32 [n], labels int32 [n],
 * tokens int32 [2, 40]); moves in generation order, labels the moves' own. A position
 * that fails validation has status != 0 and no moves. */
static PyObject *py_analyse(PyObject *self, PyObject *args) {
    PyObject *board, *hand;
    int side;
    if (!PyArg_ParseTuple(args, "OOi", &board, &hand, &side)) return NULL;
    mk_shogi_pos pos;
    if (position_arg(board, hand, side, &pos) < 0) return NULL;
    int status = mk_shogi_validate(&pos);
    uint16_t moves[MK_SHOGI_MAX_MOVES];
    int n = status == MK_SHOGI_OK ? mk_shogi_legal_moves(&pos, moves) : 0;
    npy_intp dn = n, dt[2] = {2, MK_SHOGI_TOKENS};
    PyObject *m = new_array(1, &dn, NPY_INT32), *l = new_array(1, &dn, NPY_INT32);
    PyObject *t = new_array(2, dt, NPY_INT32);
    if (!m || !l || !t) {
        Py_XDECREF(m), Py_XDECREF(l), Py_XDECREF(t);
        return NULL;
    }
    int32_t *mo = PyArray_DATA((PyArrayObject *)m), *lo = PyArray_DATA((PyArrayObject *)l);
    for (int i = 0; i < n; i++) mo[i] = moves[i], lo[i] = mk_shogi_label(moves[i], pos.side);
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
    PyObject *out[7] = {new_array(2, db, NPY_UINT8), new_array(3, dh, NPY_UINT8),
                        new_array(1, &N, NPY_UINT8), new_array(1, &N, NPY_UINT16),
                        new_array(1, &N, NPY_INT16), new_array(1, &N, NPY_FLOAT32),
                        new_array(1, &N, NPY_INT32)};
    for (int i = 0; i < 7; i++)
        if (!out[i]) {
            for (int j = 0; j < 7; j++) Py_XDECREF(out[j]);
            Py_DECREF(rec);
            return NULL;
        }
#define D(i, type) ((type *)PyArray_DATA((PyArrayObject *)out[i]))
    const uint8_t *r = PyArray_DATA(rec);
    int width = (int)PyArray_DIM(rec, 1);
    Py_BEGIN_ALLOW_THREADS;
    for (npy_intp i = 0; i < N; i++) {
        mk_shogi_record x;
        memset(&x, 0, sizeof x);
        int st = mk_shogi_decode(format, r + i * width, &x);
        memcpy(D(0, uint8_t) + i * 81, x.pos.board, 81);
        memcpy(D(1, uint8_t) + i * 14, x.pos.hand, 14);
        D(2, uint8_t)[i] = x.pos.side;
        D(3, uint16_t)[i] = x.move;
        D(4, int16_t)[i] = x.eval;
        D(5, float)[i] = x.result;
        D(6, int32_t)[i] = st;
    }
    Py_END_ALLOW_THREADS;
#undef D
    Py_DECREF(rec);
    return Py_BuildValue("NNNNNNN", out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
}

/* shogi_rows(format, records, eval_weight) -> (tokens int16 [N, 2, 40], offsets int64
 * [N + 1], labels int16 [offsets[N]], target int32 [N], value float32 [N], status int32
 * [N]): every record as a training row (sorted legal labels, the played move's index); a
 * bad record has status = its fault's code (records.h) and no labels. */
static PyObject *py_rows(PyObject *self, PyObject *args) {
    int format;
    PyObject *obj;
    double eval_weight;
    if (!PyArg_ParseTuple(args, "iOd", &format, &obj, &eval_weight) || format_arg(format) < 0)
        return NULL;
    if (!(eval_weight >= 0.0 && eval_weight <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "shogi: eval_weight must be in [0, 1], got %g", eval_weight);
        return NULL;
    }
    PyArrayObject *rec = records_arg(obj, format);
    if (!rec) return NULL;
    npy_intp N = PyArray_DIM(rec, 0), dt[3] = {N, 2, MK_SHOGI_TOKENS}, N1 = N + 1;
    PyObject *tok = new_array(3, dt, NPY_INT16), *off = new_array(1, &N1, NPY_INT64);
    PyObject *tgt = new_array(1, &N, NPY_INT32), *val = new_array(1, &N, NPY_FLOAT32);
    PyObject *sta = new_array(1, &N, NPY_INT32);
    size_t cap = (size_t)(N > 0 ? N : 1) * 128, used = 0;
    int16_t *labels = malloc(cap * sizeof *labels);
    if (!tok || !off || !tgt || !val || !sta || !labels) {
        Py_XDECREF(tok), Py_XDECREF(off), Py_XDECREF(tgt), Py_XDECREF(val), Py_XDECREF(sta);
        free(labels);
        Py_DECREF(rec);
        return labels ? NULL : PyErr_NoMemory();
    }
    int16_t *t16 = PyArray_DATA((PyArrayObject *)tok);
    int64_t *o = PyArray_DATA((PyArrayObject *)off);
    int32_t *tg = PyArray_DATA((PyArrayObject *)tgt), *st = PyArray_DATA((PyArrayObject *)sta);
    float *v = PyArray_DATA((PyArrayObject *)val);
    const uint8_t *r = PyArray_DATA(rec);
    int width = (int)PyArray_DIM(rec, 1), nomem = 0;
    Py_BEGIN_ALLOW_THREADS;
    o[0] = 0;
    for (npy_intp i = 0; i < N; i++) {
        int32_t t32[2 * MK_SHOGI_TOKENS], lab[MK_SHOGI_MAX_MOVES], target = -1;
        float value = 0;
        int n = mk_shogi_row(format, r + i * width, eval_weight, t32, lab, &target, &value);
        st[i] = n < 0 ? -n : 0;
        if (n < 0) {
            n = 0;
            for (int k = 0; k < 2 * MK_SHOGI_TOKENS; k++) t32[k] = -1;
            target = -1, value = 0;
        }
        if (used + (size_t)n > cap) {
            size_t want = cap * 2;
            int16_t *grown = realloc(labels, want * sizeof *labels);
            if (!grown) {
                nomem = 1;
                break;
            }
            labels = grown, cap = want;
        }
        for (int k = 0; k < n; k++) labels[used + k] = (int16_t)lab[k];
        used += (size_t)n;
        o[i + 1] = (int64_t)used;
        for (int k = 0; k < 2 * MK_SHOGI_TOKENS; k++) t16[i * 2 * MK_SHOGI_TOKENS + k] = (int16_t)t32[k];
        tg[i] = target;
        v[i] = value;
    }
    Py_END_ALLOW_THREADS;
    Py_DECREF(rec);
    npy_intp nl = (npy_intp)used;
    PyObject *lab = nomem ? NULL : new_array(1, &nl, NPY_INT16);
    if (lab) memcpy(PyArray_DATA((PyArrayObject *)lab), labels, used * sizeof *labels);
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

static PyMethodDef shogi_methods[] = {
    {"shogi_analyse", py_analyse, METH_VARARGS,
     "shogi_analyse(board, hand, side) -> (status, moves, labels, tokens)"},
    {"shogi_decode", py_decode, METH_VARARGS,
     "shogi_decode(format, records) -> (board, hand, side, move, eval, result, status)"},
    {"shogi_rows", py_rows, METH_VARARGS,
     "shogi_rows(format, records, eval_weight) -> (tokens, offsets, labels, target, value, status)"},
    {"shogi_reason", py_reason, METH_VARARGS, "shogi_reason(code) -> str"},
    {NULL, NULL, 0, NULL},
};

int mk_init_shogi(PyObject *module) { return PyModule_AddFunctions(module, shogi_methods); }
