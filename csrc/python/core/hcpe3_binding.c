/* Python entry points for dlshogi's hcpe3 files (csrc/shogi/hcpe3.h): the index built at
 * open, and the soft policy targets of decoded rows. manaka/shogi/hcpe3.py wraps them. */
#include "python/common/binding.h"

#include "shogi/hcpe3.h"

/* A C-contiguous 1-D array of `type` (new reference), or NULL with a ValueError naming it. */
static PyArrayObject *flat_arg(PyObject *obj, int type, const char *name) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FromAny(obj, PyArray_DescrFromType(type), 1, 1,
                                                        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
    if (!a) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "shogi: %s must be a 1-D array", name);
    }
    return a;
}

/* shogi_hcpe3_index(data uint8 [bytes], skip) -> (hcpe uint8 [cap, 38], info int64 [cap],
 * game int64 [cap], ply int32 [cap], skipped, n, fault): the first n rows of the arrays are
 * the records (cap >= n is mk_hcpe3_count's); fault is None, or (code, record, game, ply)
 * when a fault stopped the scan (skip false; n is then 0). */
static PyObject *py_hcpe3_index(PyObject *self, PyObject *args) {
    PyObject *obj;
    int skip;
    if (!PyArg_ParseTuple(args, "Op", &obj, &skip)) return NULL;
    PyArrayObject *data = flat_arg(obj, NPY_UINT8, "data");
    if (!data) return NULL;
    const uint8_t *bytes = PyArray_DATA(data);
    int64_t size = PyArray_DIM(data, 0), cap;
    Py_BEGIN_ALLOW_THREADS;
    cap = mk_hcpe3_count(bytes, size);
    Py_END_ALLOW_THREADS;
    npy_intp dh[2] = {(npy_intp)cap, MK_HCPE_BYTES}, dn = (npy_intp)cap;
    PyObject *hcpe = PyArray_SimpleNew(2, dh, NPY_UINT8), *info = PyArray_SimpleNew(1, &dn, NPY_INT64);
    PyObject *game = PyArray_SimpleNew(1, &dn, NPY_INT64), *ply = PyArray_SimpleNew(1, &dn, NPY_INT32);
    if (!hcpe || !info || !game || !ply) {
        Py_XDECREF(hcpe), Py_XDECREF(info), Py_XDECREF(game), Py_XDECREF(ply);
        Py_DECREF(data);
        return NULL;
    }
    int64_t n, skipped = 0;
    mk_hcpe3_fault fault;
    Py_BEGIN_ALLOW_THREADS;
    n = mk_hcpe3_scan(bytes, size, skip, cap, PyArray_DATA((PyArrayObject *)hcpe),
                      PyArray_DATA((PyArrayObject *)info), PyArray_DATA((PyArrayObject *)game),
                      PyArray_DATA((PyArrayObject *)ply), &skipped, &fault);
    Py_END_ALLOW_THREADS;
    Py_DECREF(data);
    PyObject *fault_obj = n < 0 ? Py_BuildValue("iLLL", fault.code, (long long)fault.record,
                                                (long long)fault.game, (long long)fault.ply)
                                : Py_NewRef(Py_None);
    if (!fault_obj) {
        Py_DECREF(hcpe), Py_DECREF(info), Py_DECREF(game), Py_DECREF(ply);
        return NULL;
    }
    /* the first n rows are the records (none after a fault) */
    return Py_BuildValue("NNNNLLN", hcpe, info, game, ply, (long long)skipped, (long long)(n < 0 ? 0 : n),
                         fault_obj);
}

/* shogi_hcpe3_policy(data uint8 [bytes], info int64 [N], side uint8 [N], labels int [total],
 * offsets int64 [N + 1]) -> (policy float32 [total], status int32 [N]): each row's soft
 * target over its sorted legal labels labels[offsets[i]:offsets[i + 1]] from its candidate
 * list at data[info[i]:] (mk_hcpe3_policy); a row with status != 0 has zeros. */
static PyObject *py_hcpe3_policy(PyObject *self, PyObject *args) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    static const int types[5] = {NPY_UINT8, NPY_INT64, NPY_UINT8, NPY_INT32, NPY_INT64};
    static const char *names[5] = {"data", "info", "side", "labels", "offsets"};
    PyArrayObject *a[5] = {NULL};
    PyObject *policy = NULL, *status = NULL;
    for (int i = 0; i < 5; i++)
        if (!(a[i] = flat_arg(o[i], types[i], names[i]))) goto done;
    npy_intp N = PyArray_DIM(a[1], 0), total = PyArray_DIM(a[3], 0);
    int64_t checked = -1; /* -1: the lengths disagree */
    if (PyArray_DIM(a[2], 0) == N && PyArray_DIM(a[4], 0) == N + 1) {
        if (!(policy = PyArray_SimpleNew(1, &total, NPY_FLOAT32)) ||
            !(status = PyArray_SimpleNew(1, &N, NPY_INT32)))
            goto done;
#define D(x) PyArray_DATA((PyArrayObject *)x)
        Py_BEGIN_ALLOW_THREADS;
        checked = mk_hcpe3_policy_rows(D(a[0]), PyArray_DIM(a[0], 0), D(a[1]), D(a[2]), D(a[3]),
                                       D(a[4]), N, total, D(policy), D(status));
        Py_END_ALLOW_THREADS;
#undef D
    }
    if (checked < 0)
        PyErr_SetString(PyExc_ValueError, "shogi_hcpe3_policy: info, side and offsets disagree with labels");
    else if (checked < N)
        PyErr_Format(PyExc_ValueError, "shogi_hcpe3_policy: row %lld's offsets or info are out of range",
                     (long long)checked);
done:
    for (int i = 0; i < 5; i++) Py_XDECREF(a[i]);
    if (PyErr_Occurred()) {
        Py_XDECREF(policy), Py_XDECREF(status);
        return NULL;
    }
    return Py_BuildValue("NN", policy, status);
}

static PyObject *py_hcpe3_reason(PyObject *self, PyObject *args) {
    int code;
    if (!PyArg_ParseTuple(args, "i", &code)) return NULL;
    return PyUnicode_FromString(mk_hcpe3_reason(code));
}

static PyMethodDef hcpe3_methods[] = {
    {"shogi_hcpe3_index", py_hcpe3_index, METH_VARARGS,
     "shogi_hcpe3_index(data, skip) -> (hcpe, info, game, ply, skipped, fault)"},
    {"shogi_hcpe3_policy", py_hcpe3_policy, METH_VARARGS,
     "shogi_hcpe3_policy(data, info, side, labels, offsets) -> (policy, status)"},
    {"shogi_hcpe3_reason", py_hcpe3_reason, METH_VARARGS, "shogi_hcpe3_reason(code) -> str"},
    {NULL, NULL, 0, NULL},
};

int mk_init_hcpe3(PyObject *module) { return PyModule_AddFunctions(module, hcpe3_methods); }
