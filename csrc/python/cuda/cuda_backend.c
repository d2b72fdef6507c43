/* manaka._cuda's hand-over of the CUDA op table (csrc/cuda/backend_cuda.cu) to manaka._core,
 * whose Model runs the one model.c over it, and the cuBLAS settings it depends on. */
#include "cuda_binding.h"

#include "core/backend.h"
#include "cuda/backend_cuda.h"
#include "cuda/cublas_dynamic.h"

/* backend_table(cublas_path=None) -> capsule: loads cuBLAS (from the path, or the loader's
 * search), checks the table is complete, and returns it for _core.Model(backend=...). */
static PyObject *py_backend_table(PyObject *self, PyObject *args) {
    const char *path = NULL;
    mk_status status;
    if (!PyArg_ParseTuple(args, "|z", &path)) return NULL;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_cublas_load(path);
    Py_END_ALLOW_THREADS;
    if (status == MK_OK) status = mk_backend_check(&mk_backend_cuda);
    if (status != MK_OK) return mk_raise_status(status);
    return PyCapsule_New((void *)&mk_backend_cuda, MK_BACKEND_CAPSULE, NULL);
}

static PyObject *py_cublas_path(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(mk_cublas_path());
}

static PyObject *py_allow_tf32(PyObject *self, PyObject *arg) {
    int allow = PyObject_IsTrue(arg);
    if (allow < 0) return NULL;
    mk_status status = mk_cublas_allow_tf32(allow);
    if (status != MK_OK) return mk_raise_status(status);
    Py_RETURN_NONE;
}

static PyMethodDef backend_methods[] = {
    {"backend_table", py_backend_table, METH_VARARGS, NULL},
    {"cublas_path", py_cublas_path, METH_NOARGS, NULL},
    {"allow_tf32", py_allow_tf32, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_cuda_backend(PyObject *module) { return PyModule_AddFunctions(module, backend_methods); }
