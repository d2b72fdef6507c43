/* The op table and the structs its entries take, as the compiler laid them out, for
 * tests/helpers/backend_table.py: the conformance suite (tests/conformance/test_backend_ops.py)
 * calls every entry of any backend's table through ctypes, and checks its ctypes mirrors of
 * these structs against the offsets below instead of trusting a hand copy.
 *
 *   _testing.backend_layout() -> {struct: (sizeof, {field: offsetof})}
 *       "mk_backend"'s fields are name, host_memory and every entry of core/backend_ops.def
 *       (generated from that list, whose completeness backend.c asserts at compile time);
 *   _testing.backend_table(name) -> the named table ("cpu", "cpu_staged") of manaka._core
 *       as a MK_BACKEND_CAPSULE, like manaka._cuda.backend_table();
 *   _testing.backend_entries(name="cpu") -> [the table's entry names], in
 *       backend_ops.def's order, after checking the named table is complete: the
 *       conformance suite enumerates them, so that an entry without a case fails it.
 * The layouts are this extension's compile of the headers; PyInit__testing refused a _core
 * whose mk_backend or mk_batch has another size. */
#include "testing.h"

#include <stddef.h>

static int add_field(PyObject *fields, const char *name, size_t offset) {
    PyObject *v = PyLong_FromSize_t(offset);
    int rc = v ? PyDict_SetItemString(fields, name, v) : -1;
    Py_XDECREF(v);
    return rc;
}

/* fields: a new dict filled by the caller; steals it into (size, fields) under `name`. */
static int add_struct(PyObject *out, const char *name, size_t size, PyObject *fields) {
    PyObject *item = fields ? Py_BuildValue("(nN)", (Py_ssize_t)size, fields) : NULL;
    int rc = item ? PyDict_SetItemString(out, name, item) : -1;
    Py_XDECREF(item);
    return rc;
}

#define FIELD(type, f) (add_field(fields, #f, offsetof(type, f)) < 0)

static PyObject *py_backend_layout(PyObject *self, PyObject *unused) {
    PyObject *out = PyDict_New(), *fields = NULL;
    if (!out) return NULL;

    if (!(fields = PyDict_New()) || FIELD(mk_backend, name) || FIELD(mk_backend, host_memory))
        goto fail;
#define MK_OP(ret, entry, params) \
    if (FIELD(mk_backend, entry)) goto fail;
#include "core/backend_ops.def"
#undef MK_OP
    if (add_struct(out, "mk_backend", sizeof(mk_backend), fields) < 0) goto fail_out;

    if (!(fields = PyDict_New()) || FIELD(mk_batch, B) || FIELD(mk_batch, S) ||
        FIELD(mk_batch, T) || FIELD(mk_batch, L) || FIELD(mk_batch, tokens) ||
        FIELD(mk_batch, legal) || FIELD(mk_batch, counts) || FIELD(mk_batch, target) ||
        FIELD(mk_batch, value) || FIELD(mk_batch, policy_target) || FIELD(mk_batch, on_device) ||
        FIELD(mk_batch, checked_V) || FIELD(mk_batch, checked_M))
        goto fail;
    if (add_struct(out, "mk_batch", sizeof(mk_batch), fields) < 0) goto fail_out;

    if (!(fields = PyDict_New()) || FIELD(mk_fault, kind) || FIELD(mk_fault, index) ||
        FIELD(mk_fault, slot) || FIELD(mk_fault, count) || FIELD(mk_fault, value) ||
        FIELD(mk_fault, real))
        goto fail;
    if (add_struct(out, "mk_fault", sizeof(mk_fault), fields) < 0) goto fail_out;

    if (!(fields = PyDict_New()) || FIELD(mk_step_shapes, B) || FIELD(mk_step_shapes, L) ||
        FIELD(mk_step_shapes, M) || FIELD(mk_step_shapes, rows) || FIELD(mk_step_shapes, T) ||
        FIELD(mk_step_shapes, V) || FIELD(mk_step_shapes, C) || FIELD(mk_step_shapes, D))
        goto fail;
    if (add_struct(out, "mk_step_shapes", sizeof(mk_step_shapes), fields) < 0) goto fail_out;

    if (!(fields = PyDict_New()) || FIELD(mk_adamw_args, lr) || FIELD(mk_adamw_args, beta1) ||
        FIELD(mk_adamw_args, beta2) || FIELD(mk_adamw_args, eps) ||
        FIELD(mk_adamw_args, weight_decay) || FIELD(mk_adamw_args, bias_correction1) ||
        FIELD(mk_adamw_args, bias_correction2))
        goto fail;
    if (add_struct(out, "mk_adamw_args", sizeof(mk_adamw_args), fields) < 0) goto fail_out;

    if (!(fields = PyDict_New()) || FIELD(mk_gemm_call, trans_a) || FIELD(mk_gemm_call, trans_b) ||
        FIELD(mk_gemm_call, M) || FIELD(mk_gemm_call, N) || FIELD(mk_gemm_call, K) ||
        FIELD(mk_gemm_call, alpha) || FIELD(mk_gemm_call, beta) || FIELD(mk_gemm_call, A) ||
        FIELD(mk_gemm_call, B) || FIELD(mk_gemm_call, C) || FIELD(mk_gemm_call, lda) ||
        FIELD(mk_gemm_call, ldb) || FIELD(mk_gemm_call, ldc))
        goto fail;
    if (add_struct(out, "mk_gemm_call", sizeof(mk_gemm_call), fields) < 0) goto fail_out;
    return out;
fail:
    Py_XDECREF(fields);
fail_out:
    Py_DECREF(out);
    return NULL;
}
#undef FIELD

static PyObject *py_backend_table(PyObject *self, PyObject *name) {
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "backend_table: name must be a str, got %s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    const mk_backend *backend = mk_backend_from_arg(name);
    if (!backend) return NULL;
    return PyCapsule_New((void *)backend, MK_BACKEND_CAPSULE, NULL);
}

static PyObject *py_backend_entries(PyObject *self, PyObject *args) {
    PyObject *name = NULL;
    if (!PyArg_ParseTuple(args, "|U", &name)) return NULL;
    if (!mk_backend_from_arg(name)) return NULL;
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
#define MK_OP(ret, entry, params)                                          \
    {                                                                      \
        PyObject *s = PyUnicode_FromString(#entry);                        \
        if (!s || PyList_Append(list, s) < 0) {                            \
            Py_XDECREF(s);                                                 \
            Py_DECREF(list);                                               \
            return NULL;                                                   \
        }                                                                  \
        Py_DECREF(s);                                                      \
    }
#include "core/backend_ops.def"
#undef MK_OP
    return list;
}

static PyMethodDef layout_methods[] = {
    {"backend_layout", py_backend_layout, METH_NOARGS,
     "backend_layout() -> {struct: (sizeof, {field: offsetof})} of mk_backend and the structs "
     "its entries take (tests call the entries through ctypes)."},
    {"backend_table", py_backend_table, METH_O,
     "backend_table(name) -> the named op table as a 'manaka.mk_backend' capsule (tests)."},
    {"backend_entries", py_backend_entries, METH_VARARGS,
     "backend_entries(name='cpu') -> the entry names of the named op table (tests)."},
    {NULL, NULL, 0, NULL},
};

int mk_init_backend_layout(PyObject *module) {
    return PyModule_AddFunctions(module, layout_methods);
}
