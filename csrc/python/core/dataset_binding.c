/* _core.check_dataset: the dataset rules (mk_check_dataset, data/loader.h) over a dataset's
 * arrays in place (memory-mapped files are not copied). manaka/validate.py checks dtypes and
 * shapes first and words the answer; this entry checks them again only as far as reading
 * the arrays safely needs. The GIL stays held, so no Python thread writes an offset between
 * its check and its use. */
#include "python/common/binding.h"

#include "data/loader.h"

/* `obj` as an aligned C-contiguous array of one of `types` (a copy only where it is not one),
 * with `ndim` dimensions: a new reference, or NULL with a TypeError naming it. */
static PyArrayObject *dataset_array(PyObject *obj, const char *name, int ndim, int type,
                                    int other_type) {
    if (!PyArray_Check(obj) || PyArray_NDIM((PyArrayObject *)obj) != ndim ||
        (PyArray_TYPE((PyArrayObject *)obj) != type &&
         PyArray_TYPE((PyArrayObject *)obj) != other_type)) {
        PyErr_Format(PyExc_TypeError, "check_dataset: %s must be a %d-dimensional array of the "
                     "format's dtype", name, ndim);
        return NULL;
    }
    return (PyArrayObject *)PyArray_FROM_OF(obj, NPY_ARRAY_IN_ARRAY);
}

static const char *const FAULT_NAMES[] = {
    [MK_FAULT_NONE] = NULL,          [MK_FAULT_TOKEN] = "token",
    [MK_FAULT_COUNT] = "count",      [MK_FAULT_LEGAL] = "legal",
    [MK_FAULT_TARGET] = "target",    [MK_FAULT_VALUE] = "value",
    [MK_FAULT_SOFT_ENTRY] = "soft_entry", [MK_FAULT_SOFT_SUM] = "soft_sum",
    [MK_FAULT_NARROW] = NULL,        [MK_FAULT_OFFSET_START] = "offset_start",
    [MK_FAULT_OFFSET_END] = "offset_end", [MK_FAULT_DUPLICATE] = "duplicate",
};

/* check_dataset(tokens, legal_offsets, legal_moves, target, value, policy_target or None,
 *               num_tokens, num_moves)
 *   -> (max_legal, None) or (max_legal, (rule, index, slot, count, value, real)) for the
 *      first fault, rule named as FAULT_NAMES. */
static PyObject *py_check_dataset(PyObject *self, PyObject *args) {
    PyObject *o[6], *result = NULL;
    long long V, M;
    if (!PyArg_ParseTuple(args, "OOOOOOLL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &V, &M))
        return NULL;
    static const char *const names[] = {"tokens", "legal_offsets", "legal_moves", "target",
                                        "value", "policy_target"};
    static const int ndims[] = {3, 1, 1, 1, 1, 1};
    static const int types[][2] = {{NPY_INT16, NPY_INT16}, {NPY_INT64, NPY_INT64},
                                   {NPY_INT16, NPY_INT32}, {NPY_INT32, NPY_INT32},
                                   {NPY_FLOAT32, NPY_FLOAT32}, {NPY_FLOAT32, NPY_FLOAT32}};
    PyArrayObject *a[6] = {NULL};
    for (int i = 0; i < 6; i++)
        if (!(i == 5 && o[i] == Py_None) &&
            !(a[i] = dataset_array(o[i], names[i], ndims[i], types[i][0], types[i][1])))
            goto done;
    const npy_intp *tok = PyArray_DIMS(a[0]);
    const int64_t N = tok[0], E = PyArray_DIM(a[2], 0);
    if (tok[1] != 2 || PyArray_DIM(a[1], 0) != N + 1 || PyArray_DIM(a[3], 0) != N ||
        PyArray_DIM(a[4], 0) != N || (a[5] && PyArray_DIM(a[5], 0) != E)) {
        PyErr_SetString(PyExc_ValueError, "check_dataset: the arrays' lengths disagree "
                        "(tokens [N, 2, T], legal_offsets [N + 1], target and value [N], "
                        "policy_target as legal_moves)");
        goto done;
    }
    mk_dataset_view d = {.num_positions = N, .tokens_per_side = tok[2],
                         .tokens = PyArray_DATA(a[0]), .legal_offsets = PyArray_DATA(a[1]),
                         .legal_moves = PyArray_DATA(a[2]), .total_moves = E,
                         .moves_itemsize = (int)PyArray_ITEMSIZE(a[2]),
                         .target = PyArray_DATA(a[3]), .value = PyArray_DATA(a[4]),
                         .policy_target = a[5] ? PyArray_DATA(a[5]) : NULL, .num_tokens = V,
                         .num_moves = M};
    mk_fault f;
    int64_t max_count;
    mk_status status = mk_check_dataset(&d, &f, &max_count);
    if (status != MK_OK) {
        mk_raise_status(status);
        goto done;
    }
    result = f.kind == MK_FAULT_NONE
                 ? Py_BuildValue("(LO)", (long long)max_count, Py_None)
                 : Py_BuildValue("(L(sLLLLd))", (long long)max_count, FAULT_NAMES[f.kind],
                                 (long long)f.index, (long long)f.slot, (long long)f.count,
                                 (long long)f.value, f.real);
done:
    for (int i = 0; i < 6; i++) Py_XDECREF(a[i]);
    return result;
}

static PyMethodDef dataset_methods[] = {
    {"check_dataset", py_check_dataset, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_dataset(PyObject *module) {
    PyObject *tolerance = PyFloat_FromDouble(MK_SOFT_TARGET_TOLERANCE);
    int rc = tolerance ? PyModule_AddObjectRef(module, "SOFT_TARGET_TOLERANCE", tolerance) : -1;
    Py_XDECREF(tolerance);
    return rc < 0 ? -1 : PyModule_AddFunctions(module, dataset_methods);
}
