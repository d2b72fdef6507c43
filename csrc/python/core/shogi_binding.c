/* Python entry points of the shogi core (csrc/shogi/): manaka/shogi/ wraps them.
 *
 * A position crosses the boundary as (board: 81 bytes of cells, hand: 14 bytes, Black's
 * seven counts then White's, in the hand kind order P L N S B R G, side: 0 or 1), the
 * layout of mk_shogi_pos (csrc/shogi/position.h). Record arrays are [N, 38] (HCPE) or
 * [N, 40] (PSV) uint8, decoded with the GIL released. */
#include "python/common/binding.h"

#include <stdlib.h>
#include <string.h>

#include "records_binding.h"
#include "shogi/hcpe3.h"
#include "shogi/move_apply.h"
#include "shogi/record_game.h"
#include "shogi/records.h"

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

/* Reads the call's arguments (board, hand, side) into *pos; 0, or -1 with an exception. */
static int position_args(PyObject *args, mk_shogi_pos *pos) {
    PyObject *board, *hand;
    int side;
    if (!PyArg_ParseTuple(args, "OOi", &board, &hand, &side)) return -1;
    return position_arg(board, hand, side, pos);
}

/* A move label encoding (MK_SHOGI_MOVES_*) or -1 with a ValueError. */
static int moves_arg(int moves) {
    if (mk_shogi_num_labels(moves) > 0) return moves;
    PyErr_Format(PyExc_ValueError, "shogi: unknown move label encoding %d", moves);
    return -1;
}

static PyObject *new_array(int ndim, npy_intp *dims, int type) {
    return PyArray_SimpleNew(ndim, dims, type);
}

/* shogi_analyse(board, hand, side, moves=0) -> (status, moves int32 [n], labels int32 [n],
 * tokens int32 [2, 40]); moves in generation order, labels the moves' own in encoding
 * `moves` (MK_SHOGI_MOVES_*). A position that fails validation has status != 0 and no moves. */
static PyObject *py_analyse(PyObject *self, PyObject *args) {
    mk_shogi_pos pos;
    PyObject *board, *hand;
    int side, encoding = MK_SHOGI_MOVES_DLSHOGI;
    if (!PyArg_ParseTuple(args, "OOi|i", &board, &hand, &side, &encoding) || moves_arg(encoding) < 0 ||
        position_arg(board, hand, side, &pos) < 0)
        return NULL;
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
    PyObject *m = new_array(1, &dn, NPY_INT32), *l = new_array(1, &dn, NPY_INT32);
    PyObject *t = new_array(2, dt, NPY_INT32);
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

/* The label buffer of shogi_rows: room for `need` labels, doubling from *cap (or taking
 * `need` itself when doubling is not enough: one record may bring up to
 * MK_SHOGI_MAX_MOVES labels, more than a small buffer's doubling). Every size is checked
 * before it is multiplied. 0, or -1 when the size overflows or realloc fails (the old
 * buffer is then still owned by the caller). */
static int reserve_labels(int32_t **labels, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t want = *cap <= SIZE_MAX / 2 ? *cap * 2 : SIZE_MAX;
    if (want < need) want = need;
    if (want > SIZE_MAX / sizeof **labels) return -1;
    int32_t *grown = realloc(*labels, want * sizeof **labels);
    if (!grown) return -1;
    *labels = grown, *cap = want;
    return 0;
}

/* shogi_rows(format, records, eval_weight[, mirror[, moves]]) -> (tokens int16 [N, 2, 40],
 * offsets int64 [N + 1], labels [offsets[N]], target int32 [N], value float32 [N], status
 * int32 [N]): every record as a training row (legal labels in encoding `moves`, in
 * ascending dlshogi label, the played move's index); labels are int16 when the encoding's
 * fit (dlshogi), else int32. A bad record has status = its fault's code (records.h) and no
 * labels. */
static PyObject *py_rows(PyObject *self, PyObject *args) {
    int format;
    PyObject *obj;
    double eval_weight;
    int mirror = 0, encoding = MK_SHOGI_MOVES_DLSHOGI;
    if (!PyArg_ParseTuple(args, "iOd|pi", &format, &obj, &eval_weight, &mirror, &encoding) ||
        format_arg(format) < 0 || moves_arg(encoding) < 0)
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
    /* A first guess of 128 labels per record (real games average fewer), grown as needed. */
    size_t cap = (size_t)(N > 0 ? N : 1), used = 0;
    cap = cap <= SIZE_MAX / (128 * sizeof(int32_t)) ? cap * 128 : MK_SHOGI_MAX_MOVES;
    int32_t *labels = malloc(cap * sizeof *labels);
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
        int n = mk_shogi_row(format, r + i * width, eval_weight, mirror, encoding, t32, lab, &target, &value);
        st[i] = n < 0 ? -n : 0;
        if (n < 0) {
            n = 0;
            for (int k = 0; k < 2 * MK_SHOGI_TOKENS; k++) t32[k] = -1;
            target = -1, value = 0;
        }
        if (reserve_labels(&labels, &cap, used + (size_t)n) < 0) {
            nomem = 1;
            break;
        }
        memcpy(labels + used, lab, (size_t)n * sizeof *lab);
        used += (size_t)n;
        o[i + 1] = (int64_t)used;
        for (int k = 0; k < 2 * MK_SHOGI_TOKENS; k++) t16[i * 2 * MK_SHOGI_TOKENS + k] = (int16_t)t32[k];
        tg[i] = target;
        v[i] = value;
    }
    Py_END_ALLOW_THREADS;
    Py_DECREF(rec);
    npy_intp nl = (npy_intp)used;
    int narrow = mk_shogi_num_labels(encoding) <= INT16_MAX + 1;
    PyObject *lab = nomem ? NULL : new_array(1, &nl, narrow ? NPY_INT16 : NPY_INT32);
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

/* shogi_map_records(path, record_bytes) -> (records uint8 [n, record_bytes], read-only,
 * file size in bytes): the file's whole records memory-mapped, n = size // record_bytes.
 * No descriptor is kept (mk_map_records), so any number of files can be mapped at once:
 * np.memmap kept one descriptor per file (Python's mmap holds a duplicate), and a folder
 * of more files than the open-file limit failed. */
static PyObject *py_map_records(PyObject *self, PyObject *args) {
    PyObject *path;
    int width;
    if (!PyArg_ParseTuple(args, "O&i", PyUnicode_FSConverter, &path, &width)) return NULL;
    PyObject *out = NULL;
    if (width != MK_HCPE_BYTES && width != MK_PSV_BYTES)
        PyErr_Format(PyExc_ValueError, "shogi: record_bytes must be %d or %d, got %d", MK_HCPE_BYTES, MK_PSV_BYTES, width);
    else
        out = mk_map_records_value(path, width, "shogi");
    Py_DECREF(path);
    return out;
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
    if (position_args(args, &pos) < 0) return NULL;
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
    if (position_args(args, &pos) < 0) return NULL;
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
    PyObject *board, *hand;
    int side, move;
    if (!PyArg_ParseTuple(args, "OOii", &board, &hand, &side, &move)) return NULL;
    mk_shogi_pos pos;
    if (position_arg(board, hand, side, &pos) < 0) return NULL;
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

static PyMethodDef shogi_methods[] = {
    {"shogi_analyse", py_analyse, METH_VARARGS,
     "shogi_analyse(board, hand, side, moves=0) -> (status, moves, labels, tokens)"},
    {"shogi_decode", py_decode, METH_VARARGS,
     "shogi_decode(format, records) -> (board, hand, side, move, eval, result, status)"},
    {"shogi_rows", py_rows, METH_VARARGS,
     "shogi_rows(format, records, eval_weight, mirror=False, moves=0) -> (tokens, offsets, labels, target, value, status)"},
    {"shogi_reason", py_reason, METH_VARARGS, "shogi_reason(code) -> str"},
    {"shogi_map_records", py_map_records, METH_VARARGS,
     "shogi_map_records(path, record_bytes) -> (records uint8 [n, record_bytes] read-only, size): "
     "memory-mapped, no file descriptor kept"},
    {"shogi_encode_hcp", py_encode_hcp, METH_VARARGS, "shogi_encode_hcp(board, hand, side) -> bytes"},
    {"shogi_in_check", py_in_check, METH_VARARGS, "shogi_in_check(board, hand, side) -> bool"},
    {"shogi_apply_move", py_apply_move, METH_VARARGS,
     "shogi_apply_move(board, hand, side, move) -> (board, hand, side, in_check)"},
    {NULL, NULL, 0, NULL},
};


/* ---------------------------------------------------------------- a row source */

/* _core.ShogiRecords(format, files, names, eval_weight, skip, mirror=False, soft=None, moves=0):
 * record files (each a uint8 [n, record bytes] array, usually memory-mapped) as one row
 * source for the Loader (csrc/data/record_source.h, the game csrc/shogi/record_game.h),
 * legal labels in encoding `moves` (position.h): its producers decode each record, generate
 * its legal moves and encode it into the batch. A bad record is an error naming its file
 * and index, or with skip is left out of its batch and counted in the loader's stats.
 * soft: for HCPE records indexed from hcpe3 files (manaka/shogi/hcpe3.py), a list of
 * (raw uint8 [bytes], info int64 [n]) per file: the hcpe3 file's bytes and each record's
 * MoveInfo offset there, from which the producers make the soft policy target.
 * The Loader takes the rows through `_row_source_capsule` (python/common/row_source_capsule.h). */
typedef struct {
    PyObject_HEAD
    mk_shogi_records game;
    mk_record_files files;
    mk_row_source source;
    const uint8_t **raw; /* soft targets: each file's hcpe3 bytes (NULL without) */
    const int64_t **info;
    int64_t *raw_size;
    PyObject *arrays; /* the record arrays, kept alive */
    PyObject *soft;   /* the (raw, info) arrays, kept alive */
} RecordsObject;

static void Records_dealloc(RecordsObject *self) {
    mk_record_files_free(&self->files);
    free(self->raw);
    free(self->info);
    free(self->raw_size);
    Py_XDECREF(self->arrays);
    Py_XDECREF(self->soft);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The soft targets' arrays (hcpe3), one (raw, info) pair per file, file i holding
 * start[i + 1] - start[i] records: 0, or -1 with an exception. */
static int soft_arg(RecordsObject *self, PyObject *soft, Py_ssize_t n, const int64_t *start) {
    self->raw = calloc((size_t)n, sizeof *self->raw);
    self->info = calloc((size_t)n, sizeof *self->info);
    self->raw_size = calloc((size_t)n, sizeof *self->raw_size);
    if (!self->raw || !self->info || !self->raw_size) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(soft, i), *raw, *info;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_ValueError, "ShogiRecords: soft[%zd] must be a (raw, info) tuple", i);
            return -1;
        }
        raw = PyTuple_GET_ITEM(pair, 0), info = PyTuple_GET_ITEM(pair, 1);
        /* read in place by the producers: exactly these types, C-contiguous */
        if (!PyArray_Check(raw) || PyArray_TYPE((PyArrayObject *)raw) != NPY_UINT8 ||
            PyArray_NDIM((PyArrayObject *)raw) != 1 || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)raw) ||
            !PyArray_Check(info) || PyArray_TYPE((PyArrayObject *)info) != NPY_INT64 ||
            PyArray_NDIM((PyArrayObject *)info) != 1 || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)info) ||
            PyArray_DIM((PyArrayObject *)info, 0) != start[i + 1] - start[i]) {
            PyErr_Format(PyExc_ValueError, "ShogiRecords: soft[%zd] must be (uint8 [bytes], int64 [records]) "
                         "C-contiguous arrays", i);
            return -1;
        }
        self->raw[i] = PyArray_DATA((PyArrayObject *)raw);
        self->raw_size[i] = PyArray_DIM((PyArrayObject *)raw, 0);
        self->info[i] = PyArray_DATA((PyArrayObject *)info);
    }
    return 0;
}

static int Records_init(RecordsObject *self, PyObject *args, PyObject *kwds) {
    PyObject *files, *names, *soft = Py_None;
    int format, skip, mirror = 0, encoding = MK_SHOGI_MOVES_DLSHOGI;
    double eval_weight;
    if (self->arrays) {
        PyErr_SetString(PyExc_RuntimeError, "ShogiRecords: already initialised");
        return -1;
    }
    mk_record_files_free(&self->files); /* what a failed earlier __init__ left */
    free(self->raw), free(self->info), free(self->raw_size);
    self->raw = NULL, self->info = NULL, self->raw_size = NULL;
    if (!PyArg_ParseTuple(args, "iO!O!dp|pOi", &format, &PyList_Type, &files, &PyList_Type, &names,
                          &eval_weight, &skip, &mirror, &soft, &encoding) ||
        format_arg(format) < 0 || moves_arg(encoding) < 0)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(files);
    if (n < 1 || n != PyList_GET_SIZE(names) || n > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "ShogiRecords: files and names must be equal, non-empty lists");
        return -1;
    }
    if (!(eval_weight >= 0.0 && eval_weight <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "ShogiRecords: eval_weight must be in [0, 1], got %g", eval_weight);
        return -1;
    }
    if (soft != Py_None) {
        if (format != MK_SHOGI_FORMAT_HCPE || !PyList_Check(soft) || PyList_GET_SIZE(soft) != n) {
            PyErr_SetString(PyExc_ValueError, "ShogiRecords: soft must be a list of (raw, info) per HCPE file");
            return -1;
        }
        if (mirror) { /* the candidates' labels are the unmirrored position's */
            PyErr_SetString(PyExc_ValueError, "ShogiRecords: mirror is not supported with soft targets (hcpe3)");
            return -1;
        }
    }
    self->game = (mk_shogi_records){.format = format, .moves = encoding, .mirror = mirror,
                                    .eval_weight = eval_weight};
    mk_record_game game = mk_shogi_record_game(&self->game);
    if (mk_record_files_arg(&self->files, &game, files, names, skip, "ShogiRecords") < 0) return -1;
    if (soft != Py_None) {
        if (soft_arg(self, soft, n, self->files.start) < 0) return -1;
        self->game.raw = self->raw, self->game.info = self->info, self->game.raw_size = self->raw_size;
        self->files.game = mk_shogi_record_game(&self->game); /* now with soft targets */
        self->soft = Py_NewRef(soft);
    }
    self->source = mk_record_row_source(&self->files);
    self->arrays = Py_NewRef(files);
    return 0;
}

static PyObject *Records_capsule(RecordsObject *self, void *closure) {
    if (!self->arrays) {
        PyErr_SetString(PyExc_RuntimeError, "ShogiRecords: not initialised");
        return NULL;
    }
    return mk_row_source_capsule((PyObject *)self, &self->source);
}

static PyGetSetDef Records_getset[] = {
    {"_row_source_capsule", (getter)Records_capsule, NULL,
     "the rows as a row source capsule for the Loader (python/common/row_source_capsule.h)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static Py_ssize_t Records_len(RecordsObject *self) { return (Py_ssize_t)self->source.num_rows; }

static PySequenceMethods Records_sequence = {.sq_length = (lenfunc)Records_len};

static PyTypeObject RecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._core.ShogiRecords",
    .tp_basicsize = sizeof(RecordsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Shogi record files as a Loader row source (use manaka.shogi.open_hcpe / open_psv).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Records_init,
    .tp_dealloc = (destructor)Records_dealloc,
    .tp_as_sequence = &Records_sequence,
    .tp_getset = Records_getset,
};

int mk_init_shogi(PyObject *module) {
    if (PyModule_AddFunctions(module, shogi_methods) < 0 || PyType_Ready(&RecordsType) < 0) return -1;
    return PyModule_AddObjectRef(module, "ShogiRecords", (PyObject *)&RecordsType);
}
