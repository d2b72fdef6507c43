/* Shared helpers of the CPython binding layer (the only code that includes Python.h).
 *
 * Argument rules, the same for every function of the binding:
 * - float arrays must be NumPy arrays of dtype float32 (TypeError otherwise: a float64
 *   array is not silently converted, because that would hide a copy and a precision change);
 * - index arrays may have any integer dtype (int16, int32, int64, ...); they are converted
 *   to int32, and a value that does not fit is a ValueError, never a wrap-around;
 * - non-contiguous or misaligned arrays are accepted and copied; inputs are never modified;
 * - index arrays are always copied (checked and read there: what another thread writes
 *   into the caller's array cannot reach a kernel); float arrays are read in place when
 *   they are already float32 and C-contiguous (a racing write changes values, not addresses);
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

#include "core/check.h"
#include "core/manaka.h"

/* New reference to a C-contiguous float32 array with `ndim` dimensions, or NULL with
 * an exception naming `op` and `name`. */
PyArrayObject *mk_float_arg(PyObject *obj, const char *op, const char *name, int ndim);

/* New reference to a C-contiguous int32 array with `ndim` dimensions, converted from
 * any integer dtype, or NULL with an exception. Always a private copy, even of an int32
 * array, so that no other thread can change an index between its check and its use. */
PyArrayObject *mk_index_arg(PyObject *obj, const char *op, const char *name, int ndim);
/* The same, except that an int32 C-contiguous array is returned itself unless
 * `private_copy` (a batch's field as stored: the copy is made where it is read). */
PyArrayObject *mk_int32_arg(PyObject *obj, const char *op, const char *name, int ndim,
                            int private_copy);
/* A ValueError "<op>: <name> holds <value> at flat position <index>, outside the int32
 * range" for a narrowing fault (mk_narrow_to_int32, host or device): -1. */
int mk_narrow_error(const char *op, const char *name, int is_signed, const mk_fault *bad);
/* A float array of `ndim` dimensions converted to C-contiguous float32 (itself when it is
 * one already): new reference, or NULL with an exception naming `op` and `name`. */
PyArrayObject *mk_float32_arg(PyObject *obj, const char *op, const char *name, int ndim);

/* An int argument (of a configuration, an op's orders) as a Python int (new reference): a
 * Python int or anything with __index__ (a NumPy integer), not a bool; else NULL with a
 * TypeError "<op>: <name> must be an int, got <type>". Its rules are C's. */
PyObject *mk_config_int_arg(PyObject *obj, const char *op, const char *name);

/* A NumPy array of `type` over `data` (not copied) that keeps `owner` alive: new
 * reference, or NULL with an exception. */
PyObject *mk_array_view(int ndim, npy_intp *dims, int type, void *data, PyObject *owner);

/* A new capsule named `name` of `pointer`, which `owner` owns: the capsule holds a
 * reference to owner (NULL with an exception). */
PyObject *mk_owned_capsule(void *pointer, const char *name, PyObject *owner);

/* The first line of a method of _core.<what> (Model, Trainer, Loader, GameRecords): one whose __init__
 * failed or never ran (its C `handle` NULL) raises instead of crashing. */
#define MK_REQUIRE(handle, what, ret)                                                         \
    if (!(handle)) {                                                                          \
        PyErr_SetString(PyExc_RuntimeError, "manaka._core." what ": not initialised");         \
        return ret;                                                                           \
    }

/* Raises the Python exception matching a failed mk_status, with mk_error()'s message. */
PyObject *mk_raise_status(mk_status status);
/* The same as "<where>: <mk_error()>". */
PyObject *mk_raise_where(const char *where, mk_status status);

/* A batch's fields agree with tokens (the same words for a host batch, batch_binding.c,
 * and a device one, cuda_batch.c): `name` has B rows; policy_target has L columns, as
 * legal has. 0, or -1 with a ValueError. */
int mk_expect_rows(const char *op, const char *name, int64_t rows, int64_t B);
int mk_expect_soft_columns(const char *op, int64_t columns, int64_t L);

/* Called by PyInit__core for each concern; each returns 0 on success, -1 with an exception. */
int mk_init_ops(PyObject *module);
int mk_init_model(PyObject *module);
int mk_init_loader(PyObject *module);
int mk_init_records(PyObject *module);
int mk_init_shogi(PyObject *module);
int mk_init_hcpe3(PyObject *module);
int mk_init_dataset(PyObject *module);

#endif
