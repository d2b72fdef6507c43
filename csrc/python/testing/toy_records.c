/* manaka._testing.ToyRecords: a second, trivial game over the record-file row source
 * (csrc/data/record_source.h), so that the tests feed the Loader rows of a game that is not
 * shogi, through the same capsule (python/common/row_source_capsule.h) and from another
 * extension than _core (whose record-file binding, python/core/records_binding.c, is
 * compiled in here too).
 *
 * A record is its own row, TOY_RECORD_BYTES uint8: tokens [2 * TOY_T], the legal count n,
 * legal ids [TOY_K] (the first n count), the target's index, the value * 255, soft weights
 * [TOY_K]. Bad records: n = 0 (code 1), n > TOY_K (2), target >= n (3), with soft targets
 * weights of the n moves summing to 0 (4). Variant 1 (variants = 2) is the record with its
 * legal list reversed (target and weights with it). tests/test_loader_row_source.py holds
 * the NumPy reference. */
#include "testing.h"

#include <stdarg.h>
#include <stdio.h>

#include "python/common/row_source_capsule.h"
#include "python/core/records_binding.h"

enum { TOY_T = 2, TOY_K = 6, TOY_RECORD_BYTES = 2 * TOY_T + 1 + TOY_K + 1 + 1 + TOY_K };

/* record_source.c reports through mk_fail: here _core's, so that mk_raise_status reads the
 * message it wrote. Hidden, as module.c's mk_error. */
__attribute__((visibility("hidden"))) mk_status mk_fail(mk_status status, const char *fmt, ...) {
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return mk_core->fail(status, "%s", message);
}

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

typedef struct {
    PyObject_HEAD
    mk_record_files files;
    mk_row_source source;
    PyObject *arrays; /* kept alive: the producers read them in place */
} ToyObject;

static void Toy_dealloc(ToyObject *self) {
    mk_record_files_free(&self->files);
    Py_XDECREF(self->arrays);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ToyRecords(files, names, skip, variants=1, soft=False): files a list of uint8 [n, 19]. */
static int Toy_init(ToyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *files, *names;
    int skip, variants = 1, soft = 0;
    if (self->arrays) {
        PyErr_SetString(PyExc_RuntimeError, "ToyRecords: already initialised");
        return -1;
    }
    mk_record_files_free(&self->files); /* what a failed earlier __init__ left */
    if (!PyArg_ParseTuple(args, "O!O!p|ip", &PyList_Type, &files, &PyList_Type, &names, &skip,
                          &variants, &soft))
        return -1;
    if (variants != 1 && variants != 2) {
        PyErr_Format(PyExc_ValueError, "ToyRecords: variants must be 1 or 2, got %d", variants);
        return -1;
    }
    mk_record_game game = {
        .name = "toy", .record_bytes = TOY_RECORD_BYTES, .variants = variants,
        .variant_notes = toy_notes, .tokens_per_side = TOY_T, .max_legal = TOY_K,
        .num_tokens = 256, .num_moves = 256, .soft = soft, .ctx = NULL,
        .row = toy_row, .reason = toy_reason,
    };
    if (mk_record_files_arg(&self->files, &game, files, names, skip, "ToyRecords") < 0) return -1;
    self->source = mk_record_row_source(&self->files);
    self->arrays = Py_NewRef(files);
    return 0;
}

static PyObject *Toy_capsule(ToyObject *self, void *closure) {
    if (!self->arrays) {
        PyErr_SetString(PyExc_RuntimeError, "ToyRecords: not initialised");
        return NULL;
    }
    return mk_row_source_capsule((PyObject *)self, &self->source);
}

static PyObject *Toy_locate(ToyObject *self, PyObject *args) {
    long long row;
    if (!PyArg_ParseTuple(args, "L", &row)) return NULL;
    if (!self->arrays || row < 0 || row >= self->source.num_rows) {
        PyErr_Format(PyExc_IndexError, "ToyRecords: row %lld is out of range", row);
        return NULL;
    }
    int file, variant;
    int64_t index;
    mk_record_locate(&self->files, row, &file, &index, &variant);
    return Py_BuildValue("iLi", file, (long long)index, variant);
}

static Py_ssize_t Toy_len(ToyObject *self) { return (Py_ssize_t)self->source.num_rows; }

static PySequenceMethods Toy_sequence = {.sq_length = (lenfunc)Toy_len};

static PyGetSetDef Toy_getset[] = {
    {MK_ROW_SOURCE_ATTRIBUTE, (getter)Toy_capsule, NULL, "the rows as a row source capsule", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Toy_methods[] = {
    {"locate", (PyCFunction)Toy_locate, METH_VARARGS,
     "locate(row) -> (file, record index, variant): mk_record_locate"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ToyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._testing.ToyRecords",
    .tp_basicsize = sizeof(ToyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A trivial game's record files as a Loader row source (tests only).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Toy_init,
    .tp_dealloc = (destructor)Toy_dealloc,
    .tp_as_sequence = &Toy_sequence,
    .tp_getset = Toy_getset,
    .tp_methods = Toy_methods,
};

int mk_init_toy_records(PyObject *module) {
    if (PyType_Ready(&ToyType) < 0) return -1;
    if (PyModule_AddIntConstant(module, "TOY_RECORD_BYTES", TOY_RECORD_BYTES) < 0) return -1;
    return PyModule_AddObjectRef(module, "ToyRecords", (PyObject *)&ToyType);
}
