/* Shared helpers of the CPython binding layer (the only code that includes Python.h).
 *
 * Argument rules, the same for every function of the binding:
 * - float arrays must be NumPy arrays of dtype float32 (TypeError otherwise: a float64
 *   array is not silently converted, because that would hide a copy and a precision change);
 * - index arrays may have any integer dtype (int16, int32, int64, ...); they are converted
 *   to int32, and a value that does not fit is a ValueError, never a wrap-around;
 * - non-contiguous or misaligned arrays are accepted and copied; inputs are never modified;
 * - the number of dimensions must match exactly (ValueError naming the argument).
 */
#ifndef MANAKA_BINDING_H
#define MANAKA_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define PY_ARRAY_UNIQUE_SYMBOL manaka_ARRAY_API
#ifndef MANAKA_BINDING_MAIN
#define NO_IMPORT_ARRAY
#endif
#define NPY_NO_DEPRECATED_API NPY_1_20_API_VERSION
#include <numpy/arrayobject.h>

#include "../manaka.h"

/* New reference to a C-contiguous float32 array with `ndim` dimensions, or NULL with
 * an exception naming `op` and `name`. */
PyArrayObject *mk_float_arg(PyObject *obj, const char *op, const char *name, int ndim);

/* New reference to a C-contiguous int32 array with `ndim` dimensions, converted from
 * any integer dtype, or NULL with an exception. */
PyArrayObject *mk_index_arg(PyObject *obj, const char *op, const char *name, int ndim);

/* Raises the Python exception matching a failed mk_status, with mk_error()'s message. */
PyObject *mk_raise_status(mk_status status);
/* The same as "<where>: <mk_error()>". */
PyObject *mk_raise_where(const char *where, mk_status status);

/* Called by PyInit__core for each concern; each returns 0 on success, -1 with an exception. */
int mk_init_ops(PyObject *module);
int mk_init_model(PyObject *module);
int mk_init_loader(PyObject *module);

#endif
