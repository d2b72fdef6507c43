/* Argument conversion shared by every binding file: see binding.h for the rules. */
#include "binding.h"

static int check_array(PyObject *obj, const char *op, const char *name) {
    if (obj == NULL || obj == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: %s is required, got None", op, name);
        return -1;
    }
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a NumPy array, got %s", op, name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

static int check_ndim(PyArrayObject *arr, const char *op, const char *name, int ndim) {
    if (PyArray_NDIM(arr) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %d dimension%s, got %d", op, name, ndim,
                     ndim == 1 ? "" : "s", PyArray_NDIM(arr));
        return -1;
    }
    return 0;
}

/* A float32 array (any float dtype, converted, when `any_float`), else NULL with a
 * TypeError naming the dtype rule. */
static PyArrayObject *float_arg(PyObject *obj, const char *op, const char *name, int ndim,
                                int any_float) {
    if (check_array(obj, op, name) < 0) return NULL;
    PyArrayObject *arr = (PyArrayObject *)obj;
    if (any_float ? !PyArray_ISFLOAT(arr) : PyArray_TYPE(arr) != NPY_FLOAT32) {
        PyObject *dtype = PyObject_Str((PyObject *)PyArray_DESCR(arr));
        PyErr_Format(PyExc_TypeError, "%s: %s must have %s, got %S", op, name,
                     any_float ? "a float dtype" : "dtype float32", dtype);
        Py_XDECREF(dtype);
        return NULL;
    }
    if (check_ndim(arr, op, name, ndim) < 0) return NULL;
    return (PyArrayObject *)PyArray_FROM_OTF(obj, NPY_FLOAT32,
                                             NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
}

PyArrayObject *mk_float_arg(PyObject *obj, const char *op, const char *name, int ndim) {
    return float_arg(obj, op, name, ndim, 0);
}
PyArrayObject *mk_float32_arg(PyObject *obj, const char *op, const char *name, int ndim) {
    return float_arg(obj, op, name, ndim, 1);
}

/* A new int32 array with the contents of `arr` (int32), owned by the binding alone.
 *
 * Why always a copy: the index arrays are checked and then used as offsets by the
 * kernels, and the check may run long before the kernels read them, with the GIL
 * released (in trainer.c, model.c and the ops' entry point, op_call.c). Used in place,
 * another thread could write an out-of-range id into the caller's array between the check
 * and the read (that raced write once caused SEGVs in pair_sums.c, gather_dot_rows.h, and
 * an out-of-bounds write in pair_groups.c). No other code holds a
 * reference to the copy, so what is checked is exactly what is read. The copy is made
 * with memcpy under the GIL, so no Python thread can free or resize the source while it
 * is read; a concurrent writer can only make it a mix of old and new values, which the
 * range checks then judge. Cost: the batch's index arrays, a few MB per step at most
 * (tokens [B, 2, T] and legal [B, L]; about 0.02 % of a seed step). Float arrays are still used in place: a racing write changes values only,
 * never an address. */
static PyArrayObject *private_int32(PyArrayObject *arr, PyObject *obj) {
    if (!PyArray_ISCARRAY_RO(arr) || !PyArray_ISNOTSWAPPED(arr)) /* converting copies anyway */
        return (PyArrayObject *)PyArray_FROM_OTF(obj, NPY_INT32,
                                                 NPY_ARRAY_IN_ARRAY | NPY_ARRAY_ENSURECOPY);
    PyArrayObject *out =
        (PyArrayObject *)PyArray_SimpleNew(PyArray_NDIM(arr), PyArray_DIMS(arr), NPY_INT32);
    if (out) memcpy(PyArray_DATA(out), PyArray_DATA(arr), (size_t)PyArray_NBYTES(arr));
    return out;
}

PyArrayObject *mk_index_arg(PyObject *obj, const char *op, const char *name, int ndim) {
    return mk_int32_arg(obj, op, name, ndim, 1);
}

PyArrayObject *mk_int32_arg(PyObject *obj, const char *op, const char *name, int ndim,
                            int private_copy) {
    if (check_array(obj, op, name) < 0) return NULL;
    PyArrayObject *arr = (PyArrayObject *)obj;
    if (!PyArray_ISINTEGER(arr)) {
        PyObject *dtype = PyObject_Str((PyObject *)PyArray_DESCR(arr));
        PyErr_Format(PyExc_TypeError, "%s: %s must have an integer dtype, got %S", op, name,
                     dtype);
        Py_XDECREF(dtype);
        return NULL;
    }
    if (check_ndim(arr, op, name, ndim) < 0) return NULL;
    if (PyArray_TYPE(arr) == NPY_INT32 && private_copy) return private_int32(arr, obj);
    if (PyArray_TYPE(arr) == NPY_INT32)
        return (PyArrayObject *)PyArray_FROM_OTF(obj, NPY_INT32, NPY_ARRAY_IN_ARRAY);
    /* Narrowed with a range check instead of a silent wrap, from a native, contiguous copy
     * (itself when it is one already: mk_narrow_to_int32 reads each element once). */
    const int is_signed = PyTypeNum_ISSIGNED(PyArray_TYPE(arr));
    PyArrayObject *src = (PyArrayObject *)PyArray_FROM_OTF(obj, PyArray_TYPE(arr), NPY_ARRAY_IN_ARRAY);
    PyArrayObject *out = src ? (PyArrayObject *)PyArray_SimpleNew(ndim, PyArray_DIMS(src), NPY_INT32) : NULL;
    mk_fault bad = {0};
    if (out)
        mk_narrow_to_int32(PyArray_DATA(src), (int)PyArray_ITEMSIZE(src), is_signed, PyArray_SIZE(src),
                           PyArray_DATA(out), &bad);
    Py_XDECREF(src);
    if (bad.kind == MK_FAULT_NONE) return out;
    Py_DECREF(out);
    mk_narrow_error(op, name, is_signed, &bad);
    return NULL;
}

int mk_narrow_error(const char *op, const char *name, int is_signed, const mk_fault *bad) {
    if (is_signed)
        PyErr_Format(PyExc_ValueError, "%s: %s holds %lld at flat position %lld, outside the int32 range",
                     op, name, (long long)bad->value, (long long)bad->index);
    else /* a uint64 above INT64_MAX: its bits */
        PyErr_Format(PyExc_ValueError, "%s: %s holds %llu at flat position %lld, outside the int32 range",
                     op, name, (unsigned long long)bad->value, (long long)bad->index);
    return -1;
}

PyObject *mk_config_int_arg(PyObject *obj, const char *op, const char *name) {
    PyObject *value = !PyBool_Check(obj) && PyIndex_Check(obj) ? PyNumber_Index(obj) : NULL;
    if (!value && (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError))) {
        PyErr_Clear(); /* also an __index__ that refuses: the message names the argument */
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int, got %s", op, name,
                     Py_TYPE(obj)->tp_name);
    }
    return value;
}

PyObject *mk_array_view(int ndim, npy_intp *dims, int type, void *data, PyObject *owner) {
    PyObject *arr = PyArray_SimpleNewFromData(ndim, dims, type, data);
    if (!arr) return NULL;
    if (PyArray_SetBaseObject((PyArrayObject *)arr, Py_NewRef(owner)) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

static void owned_capsule_release(PyObject *capsule) {
    Py_XDECREF(PyCapsule_GetContext(capsule));
}

PyObject *mk_owned_capsule(void *pointer, const char *name, PyObject *owner) {
    PyObject *capsule = PyCapsule_New(pointer, name, owned_capsule_release);
    if (capsule && PyCapsule_SetContext(capsule, Py_NewRef(owner)) < 0) {
        Py_DECREF(owner);
        Py_CLEAR(capsule);
    }
    return capsule;
}

static PyObject *exception_for(mk_status status) {
    switch (status) {
    case MK_ERR_VALUE: return PyExc_ValueError;
    case MK_ERR_TYPE: return PyExc_TypeError;
    case MK_ERR_NOMEM: return PyExc_MemoryError;
    case MK_ERR_FLOAT: return PyExc_FloatingPointError;
    default: return PyExc_RuntimeError;
    }
}

PyObject *mk_raise_status(mk_status status) {
    PyErr_SetString(exception_for(status), mk_error()[0] ? mk_error() : "manaka: unknown error");
    return NULL;
}

PyObject *mk_raise_where(const char *where, mk_status status) {
    PyErr_Format(exception_for(status), "%s: %s", where, mk_error());
    return NULL;
}

int mk_expect_rows(const char *op, const char *name, int64_t rows, int64_t B) {
    if (rows == B) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s has %lld rows but tokens has %lld", op, name,
                 (long long)rows, (long long)B);
    return -1;
}

int mk_expect_soft_columns(const char *op, int64_t columns, int64_t L) {
    if (columns == L) return 0;
    PyErr_Format(PyExc_ValueError, "%s: policy_target has %lld columns but legal has %lld (L)",
                 op, (long long)columns, (long long)L);
    return -1;
}
