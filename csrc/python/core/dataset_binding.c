/* A dataset's arrays as C reads them in place (mk_dataset_arg, for _core.Loader and
 * _core.check_dataset), and _core.check_dataset: the dataset rules (mk_check_dataset,
 * data/loader.h) over them (memory-mapped files are not copied). manaka/validate.py checks
 * dtypes and shapes first and words the answer; this entry checks them again only as far
 * as reading the arrays safely needs. The GIL stays held, so no Python thread writes an
 * offset between its check and its use. */
#include "model_binding.h"

/* A borrowed, validated array: exact dtype, ndim, C-contiguous and aligned (it is read
 * in place, by other threads too: no copy of a memory-mapped file is ever made). */
static PyArrayObject *dataset_array(const char *op, PyObject *obj, const char *name, int type1,
                                    int type2, int ndim) {
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a NumPy array, got %s", op, name,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != type1 && PyArray_TYPE(a) != type2) {
        PyObject *dtype = PyObject_Str((PyObject *)PyArray_DESCR(a));
        PyErr_Format(PyExc_TypeError, "%s: %s has dtype %S, not the dataset format's", op, name,
                     dtype);
        Py_XDECREF(dtype);
        return NULL;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %d dimension(s), got %d", op, name, ndim,
                     PyArray_NDIM(a));
        return NULL;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be C-contiguous and aligned", op, name);
        return NULL;
    }
    return a;
}

static int check_len(const char *op, PyArrayObject *a, const char *name, int64_t want,
                     const char *why) {
    if ((int64_t)PyArray_DIM(a, 0) == want) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s has %lld entries, expected %lld (%s)", op, name,
                 (long long)PyArray_DIM(a, 0), (long long)want, why);
    return -1;
}

int mk_dataset_arg(const char *op, PyObject *const obj[6], int64_t V, int64_t M,
                   mk_dataset_view *view) {
    PyArrayObject *tokens, *offsets, *moves, *target, *value, *policy = NULL;
    if (!(tokens = dataset_array(op, obj[0], "tokens", NPY_INT16, NPY_INT16, 3)) ||
        !(offsets = dataset_array(op, obj[1], "legal_offsets", NPY_INT64, NPY_INT64, 1)) ||
        !(moves = dataset_array(op, obj[2], "legal_moves", NPY_INT16, NPY_INT32, 1)) ||
        !(target = dataset_array(op, obj[3], "target", NPY_INT32, NPY_INT32, 1)) ||
        !(value = dataset_array(op, obj[4], "value", NPY_FLOAT32, NPY_FLOAT32, 1)) ||
        (obj[5] != Py_None &&
         !(policy = dataset_array(op, obj[5], "policy_target", NPY_FLOAT32, NPY_FLOAT32, 1))))
        return -1;
    int64_t N = PyArray_DIM(tokens, 0);
    if (PyArray_DIM(tokens, 1) != 2) {
        PyErr_Format(PyExc_ValueError, "%s: tokens must be [N, 2, T], got shape[1] = %lld", op,
                     (long long)PyArray_DIM(tokens, 1));
        return -1;
    }
    if (check_len(op, offsets, "legal_offsets", N + 1, "N + 1") ||
        check_len(op, target, "target", N, "N = tokens.shape[0]") ||
        check_len(op, value, "value", N, "N = tokens.shape[0]") ||
        (policy && check_len(op, policy, "policy_target", PyArray_DIM(moves, 0), "len(legal_moves)")))
        return -1;
    *view = (mk_dataset_view){
        .num_positions = N,
        .tokens_per_side = PyArray_DIM(tokens, 2),
        .tokens = PyArray_DATA(tokens),
        .legal_offsets = PyArray_DATA(offsets),
        .legal_moves = PyArray_DATA(moves),
        .total_moves = PyArray_DIM(moves, 0),
        .moves_itemsize = (int)PyArray_ITEMSIZE(moves),
        .target = PyArray_DATA(target),
        .value = PyArray_DATA(value),
        .policy_target = policy ? PyArray_DATA(policy) : NULL,
        .num_tokens = V,
        .num_moves = M,
    };
    return 0;
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
    PyObject *o[6];
    long long V, M;
    mk_dataset_view d;
    if (!PyArg_ParseTuple(args, "OOOOOOLL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &V, &M) ||
        mk_dataset_arg("check_dataset", o, V, M, &d) < 0)
        return NULL;
    mk_fault f;
    int64_t max_count;
    mk_status status = mk_check_dataset(&d, &f, &max_count);
    if (status != MK_OK) return mk_raise_status(status);
    if (f.kind == MK_FAULT_NONE) return Py_BuildValue("(LO)", (long long)max_count, Py_None);
    return Py_BuildValue("(L(sLLLLd))", (long long)max_count, FAULT_NAMES[f.kind],
                         (long long)f.index, (long long)f.slot, (long long)f.count,
                         (long long)f.value, f.real);
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
