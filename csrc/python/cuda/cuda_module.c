/* manaka._cuda: the CUDA backend's CPython module (built only when the CUDA toolkit is
 * found; see setup.py). It links the CUDA runtime statically, so importing it needs no
 * CUDA library; with no GPU or driver every function still works and says why there is
 * no device. Assembles DeviceArray (cuda_array.c) and the ops (cuda_ops.c). */
#define MANAKA_BINDING_MAIN
#include "cuda_binding.h"

#ifndef MK_CUDA_ARCHS
#define MK_CUDA_ARCHS "unknown"
#endif

/* probe() -> (device_count, message): message is "" when a device is usable, else the
 * CUDA error that says why not (no driver, no device, ...). */
static PyObject *py_probe(PyObject *self, PyObject *unused) {
    int count = 0;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_cuda_device_count(&count);
    Py_END_ALLOW_THREADS;
    return Py_BuildValue("(is)", status == MK_OK ? count : 0, status == MK_OK ? "" : mk_error());
}

static PyObject *py_device_name(PyObject *self, PyObject *args) {
    int device = -1;
    char name[256];
    if (!PyArg_ParseTuple(args, "|i", &device)) return NULL;
    mk_status status = device < 0 ? mk_cuda_current_device(&device) : MK_OK;
    if (status == MK_OK) status = mk_cuda_device_name(device, name, sizeof name);
    if (status != MK_OK) return mk_raise_status(status);
    return PyUnicode_FromString(name);
}

static PyObject *py_synchronize(PyObject *self, PyObject *unused) {
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_cuda_synchronize();
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) return mk_raise_status(status);
    Py_RETURN_NONE;
}

/* _device_copy(dst, src): copies one DeviceArray into another of the same size on the
 * device (the benchmark's bandwidth probe). Asynchronous, on the legacy stream. */
static PyObject *py_device_copy(PyObject *self, PyObject *args) {
    mk_device_array *dst, *src;
    if (!PyArg_ParseTuple(args, "O!O!", &mk_DeviceArray_Type, &dst, &mk_DeviceArray_Type, &src))
        return NULL;
    int64_t bytes = mk_shape_size(dst->ndim, dst->shape) * dst->dtype->itemsize;
    if (bytes != mk_shape_size(src->ndim, src->shape) * src->dtype->itemsize) {
        PyErr_SetString(PyExc_ValueError, "_device_copy: dst and src must have the same nbytes");
        return NULL;
    }
    mk_status status = mk_cuda_copy_device(dst->ptr, src->ptr, (size_t)bytes, NULL);
    if (status != MK_OK) return mk_raise_status(status);
    Py_RETURN_NONE;
}

/* launch_count() -> kernel launches (and cuBLAS calls) made so far by this process. */
static PyObject *py_launch_count(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(mk_cuda_launch_count());
}

/* alloc_count() -> device memory allocations (cudaMalloc and the workspace pool) made so
 * far by this process: the tests' proof that a warmed-up training step allocates nothing. */
static PyObject *py_alloc_count(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(mk_cuda_alloc_count());
}

/* mem_info() -> (free, total) bytes of the current device. */
static PyObject *py_mem_info(PyObject *self, PyObject *unused) {
    size_t free_bytes = 0, total_bytes = 0;
    mk_status status = mk_cuda_mem_info(&free_bytes, &total_bytes);
    if (status != MK_OK) return mk_raise_status(status);
    return Py_BuildValue("(nn)", (Py_ssize_t)free_bytes, (Py_ssize_t)total_bytes);
}

static PyObject *py_build_info(PyObject *self, PyObject *unused) {
    int runtime, driver;
    mk_cuda_versions(&runtime, &driver);
    return Py_BuildValue("{s:s,s:i,s:i}", "archs", MK_CUDA_ARCHS, "runtime_version", runtime,
                         "driver_version", driver);
}

static PyMethodDef module_methods[] = {
    {"probe", py_probe, METH_NOARGS, NULL},
    {"device_name", py_device_name, METH_VARARGS, NULL},
    {"synchronize", py_synchronize, METH_NOARGS, NULL},
    {"build_info", py_build_info, METH_NOARGS, NULL},
    {"launch_count", py_launch_count, METH_NOARGS, NULL},
    {"mem_info", py_mem_info, METH_NOARGS, NULL},
    {"alloc_count", py_alloc_count, METH_NOARGS, NULL},
    {"_device_copy", py_device_copy, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "manaka._cuda", "manaka's CUDA backend.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__cuda(void) {
    import_array();
    if (mk_check_engine("manaka._cuda") < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    if (mk_init_device_array(module) < 0 || mk_init_cuda_ops(module) < 0 ||
        mk_init_cuda_backend(module) < 0 || mk_init_cuda_batch(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
