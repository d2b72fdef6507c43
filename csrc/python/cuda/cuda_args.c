/* GPU arguments: reading a DeviceArray, a __cuda_array_interface__ dict or a DLPack
 * capsule into one mk_gpu_array (see cuda_binding.h for the rules). Parsing is separate
 * from attaching (device and stream checks), so every malformed interface is reported
 * identically with or without a GPU. */
#include "cuda_binding.h"

static int fail(PyObject *type, const char *op, const char *name, const char *fmt, ...) {
    char msg[512];
    va_list args;
    va_start(args, fmt);
    PyOS_vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    PyErr_Format(type, "%s: %s %s", op, name, msg);
    return -1;
}

/* C-contiguous: strides (in bytes, or NULL) match the row-major layout; dimensions of
 * extent 1 may have any stride, and an empty array is contiguous. */
static int check_contiguous(mk_gpu_array *a, const int64_t *strides_bytes, const char *op) {
    if (!strides_bytes || mk_shape_size(a->ndim, a->shape) == 0) return 0;
    if (!a->dtype) return 0; /* unknown dtype: the dtype check reports it */
    int64_t want = a->dtype->itemsize;
    for (int i = a->ndim - 1; i >= 0; i--) {
        if (a->shape[i] != 1 && strides_bytes[i] != want)
            return fail(PyExc_ValueError, op, a->name,
                        "must be C-contiguous on the GPU (dimension %d has a stride of %lld "
                        "bytes, %lld expected); make a contiguous copy first "
                        "(x.contiguous() in PyTorch, cupy.ascontiguousarray(x))",
                        i, (long long)strides_bytes[i], (long long)want);
        want *= a->shape[i];
    }
    return 0;
}

static int parse_device_array(mk_device_array *d, mk_gpu_array *a) {
    a->ptr = d->ptr;
    a->ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) a->shape[i] = d->shape[i];
    a->dtype = d->dtype;
    snprintf(a->typestr, sizeof a->typestr, "%s", d->dtype->typestr);
    a->readonly = d->readonly;
    a->device = d->device;
    a->source = "DeviceArray";
    Py_INCREF(d);
    a->ref = (PyObject *)d;
    return 0;
}

/* An int entry of the interface (not a bool), into *value. */
static int cai_int(PyObject *item, const char *op, const char *name, const char *what,
                   long long *value) {
    if (!PyLong_Check(item) || PyBool_Check(item))
        return fail(PyExc_TypeError, op, name, "has a malformed __cuda_array_interface__: %s must be an int, got %s",
                    what, Py_TYPE(item)->tp_name);
    *value = PyLong_AsLongLong(item);
    if (*value == -1 && PyErr_Occurred()) return -1;
    return 0;
}

#define CAI "has a malformed __cuda_array_interface__: "

static int parse_cai(PyObject *obj, PyObject *cai, const char *op, mk_gpu_array *a) {
    const char *name = a->name;
    long long v = 0;
    int64_t strides[MK_MAX_DIMS];
    int has_strides = 0;
    a->source = "__cuda_array_interface__";
    if (!PyDict_Check(cai))
        return fail(PyExc_TypeError, op, name, CAI "a dict is required, got %s", Py_TYPE(cai)->tp_name);
    PyObject *version = PyDict_GetItemString(cai, "version");
    if (!version) return fail(PyExc_ValueError, op, name, CAI "no 'version'");
    if (cai_int(version, op, name, "version", &v) < 0) return -1;
    if (v < 0 || v > 3)
        return fail(PyExc_ValueError, op, name, "exports __cuda_array_interface__ version %lld; manaka reads versions 0 to 3", v);

    PyObject *shape = PyDict_GetItemString(cai, "shape");
    if (!shape || !PyTuple_Check(shape))
        return fail(PyExc_ValueError, op, name, CAI "'shape' must be a tuple of ints");
    if (PyTuple_GET_SIZE(shape) > MK_MAX_DIMS)
        return fail(PyExc_ValueError, op, name, "has %zd dimensions; at most %d are supported",
                    PyTuple_GET_SIZE(shape), MK_MAX_DIMS);
    a->ndim = (int)PyTuple_GET_SIZE(shape);
    for (int i = 0; i < a->ndim; i++) {
        if (cai_int(PyTuple_GET_ITEM(shape, i), op, name, "'shape' items", &v) < 0) return -1;
        if (v < 0) return fail(PyExc_ValueError, op, name, CAI "shape[%d] = %lld is negative", i, v);
        a->shape[i] = v;
    }
    if (mk_shape_check(a->ndim, a->shape, op, name) < 0) return -1;

    PyObject *typestr = PyDict_GetItemString(cai, "typestr");
    if (!typestr || !PyUnicode_Check(typestr))
        return fail(PyExc_ValueError, op, name, CAI "'typestr' must be a str");
    const char *ts = PyUnicode_AsUTF8(typestr);
    if (!ts) return -1;
    snprintf(a->typestr, sizeof a->typestr, "%s", ts);
    a->dtype = mk_dtype_from_typestr(ts);

    PyObject *data = PyDict_GetItemString(cai, "data");
    if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2)
        return fail(PyExc_ValueError, op, name, CAI "'data' must be a (pointer, read_only) tuple");
    PyObject *ptr = PyTuple_GET_ITEM(data, 0);
    if (!PyLong_Check(ptr) || PyBool_Check(ptr))
        return fail(PyExc_TypeError, op, name, CAI "the data pointer must be an int, got %s",
                    Py_TYPE(ptr)->tp_name);
    unsigned long long address = PyLong_AsUnsignedLongLong(ptr);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return fail(PyExc_ValueError, op, name, CAI "the data pointer must be a non-negative 64-bit address");
    }
    if (address == 0 && mk_shape_size(a->ndim, a->shape) > 0)
        return fail(PyExc_ValueError, op, name, CAI "the data pointer is 0 (NULL) for a non-empty array");
    a->ptr = (void *)(uintptr_t)address;
    int ro = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
    if (ro < 0) return -1;
    a->readonly = ro;

    PyObject *st = PyDict_GetItemString(cai, "strides");
    if (st && st != Py_None) {
        if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != a->ndim)
            return fail(PyExc_ValueError, op, name, CAI "'strides' must be None or a tuple of %d ints", a->ndim);
        for (int i = 0; i < a->ndim; i++) {
            if (cai_int(PyTuple_GET_ITEM(st, i), op, name, "'strides' items", &v) < 0) return -1;
            strides[i] = v;
        }
        has_strides = 1;
    }
    PyObject *mask = PyDict_GetItemString(cai, "mask");
    if (mask && mask != Py_None)
        return fail(PyExc_ValueError, op, name, "is a masked array (__cuda_array_interface__ 'mask'); manaka does not support masks");

    /* v3 'stream': None/absent = nothing to wait for; 1 legacy default, 2 per-thread
     * default, else a cudaStream_t; 0 is disallowed by the spec (ambiguous). */
    PyObject *stream = PyDict_GetItemString(cai, "stream");
    if (stream && stream != Py_None) {
        if (cai_int(stream, op, name, "'stream'", &v) < 0) return -1;
        if (v == 0)
            return fail(PyExc_ValueError, op, name, CAI "'stream' is 0, which the CUDA Array Interface disallows (use 1 for the legacy default stream, 2 for per-thread)");
        if (v < 0) return fail(PyExc_ValueError, op, name, CAI "'stream' = %lld is negative", v);
        a->has_stream = 1;
        a->stream = (void *)(uintptr_t)v;
    }
    Py_INCREF(obj);
    a->ref = obj;
    return check_contiguous(a, has_strides ? strides : NULL, op);
}

static int parse_dlpack(PyObject *obj, const char *op, void *consumer, mk_gpu_array *a) {
    const char *name = a->name;
    a->source = "__dlpack__";
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!dev) return -1;
    int type, id;
    if (!PyTuple_Check(dev) || !PyArg_ParseTuple(dev, "ii", &type, &id)) {
        Py_DECREF(dev);
        PyErr_Clear();
        return fail(PyExc_TypeError, op, name, "has a malformed __dlpack_device__(): a (device_type, device_id) tuple of ints is required");
    }
    Py_DECREF(dev);
    if (type != kDLCUDA && type != kDLCUDAManaged)
        return fail(PyExc_TypeError, op, name,
                    "is on DLPack device type %d, not CUDA (2) or CUDA managed (13); "
                    "a CPU array cannot be mixed with GPU arrays", type);
    /* Ask for the data to be ready on the consumer's stream (the legacy default stream,
     * 1, where manaka's ops run); producers that predate the stream argument are asked
     * without it. */
    PyObject *kwargs = Py_BuildValue("{s:K}", "stream", (unsigned long long)(uintptr_t)consumer);
    PyObject *capsule = NULL;
    if (!kwargs) return -1;
    PyObject *method = PyObject_GetAttrString(obj, "__dlpack__");
    if (method) {
        PyObject *empty = PyTuple_New(0);
        capsule = empty ? PyObject_Call(method, empty, kwargs) : NULL;
        Py_XDECREF(empty);
        if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            capsule = PyObject_CallNoArgs(method);
        }
        Py_DECREF(method);
    }
    Py_DECREF(kwargs);
    if (!capsule) return -1;
    if (!PyCapsule_IsValid(capsule, "dltensor")) {
        const char *cname = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
        fail(PyExc_TypeError, op, name,
             "__dlpack__() returned %s%s%s, not an unconsumed \"dltensor\" capsule", cname ? "a capsule named \"" : Py_TYPE(capsule)->tp_name,
             cname ? cname : "", cname ? "\"" : "");
        Py_DECREF(capsule);
        return -1;
    }
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    /* Consumed: renamed so the capsule's destructor leaves the tensor to us, and deleted
     * in mk_gpu_release when the op is done with it. */
    if (!m || PyCapsule_SetName(capsule, "used_dltensor") < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    Py_DECREF(capsule);
    a->dl = m;
    const DLTensor *t = &m->dl_tensor;
    if (t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged)
        return fail(PyExc_TypeError, op, name,
                    "is a DLPack tensor on device type %d, not CUDA (its __dlpack_device__ said %d)",
                    t->device.device_type, type);
    if (t->ndim < 0 || t->ndim > MK_MAX_DIMS)
        return fail(PyExc_ValueError, op, name, "has %d dimensions; at most %d are supported",
                    t->ndim, MK_MAX_DIMS);
    a->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return fail(PyExc_ValueError, op, name, "is a DLPack tensor with shape[%d] = %lld", i,
                        (long long)t->shape[i]);
        a->shape[i] = t->shape[i];
    }
    if (mk_shape_check(a->ndim, a->shape, op, name) < 0) return -1;
    a->dtype = mk_dtype_from_dlpack(t->dtype);
    snprintf(a->typestr, sizeof a->typestr, "dlpack(%u,%u,%u)", t->dtype.code, t->dtype.bits,
             t->dtype.lanes);
    if (a->dtype) snprintf(a->typestr, sizeof a->typestr, "%s", a->dtype->typestr);
    a->ptr = (char *)t->data + t->byte_offset;
    a->device = t->device.device_id;
    a->readonly = 0; /* the legacy DLPack struct has no read-only flag */
    Py_INCREF(obj);
    a->ref = obj;
    if (t->strides && a->dtype) {
        int64_t bytes[MK_MAX_DIMS];
        for (int i = 0; i < t->ndim; i++) bytes[i] = t->strides[i] * a->dtype->itemsize;
        return check_contiguous(a, bytes, op);
    }
    return 0;
}

int mk_gpu_parse(PyObject *obj, const char *op, const char *name, void *consumer,
                 mk_gpu_array *a) {
    memset(a, 0, sizeof *a);
    a->name = name;
    a->device = -1;
    if (obj == NULL || obj == Py_None)
        return fail(PyExc_TypeError, op, name, "is required, got None");
    if (mk_DeviceArray_Check(obj)) return parse_device_array((mk_device_array *)obj, a);
    if (PyArray_Check(obj))
        return fail(PyExc_TypeError, op, name,
                    "is a NumPy (CPU) array but other arguments are on the GPU; pass every "
                    "array on the same device (DeviceArray.from_numpy copies it over)");
    /* DLPack first: its producer orders its own stream before the one we name, which
     * also covers producers whose __cuda_array_interface__ is v2 and carries no stream
     * (PyTorch's). */
    if (PyObject_HasAttrString(obj, "__dlpack__") && PyObject_HasAttrString(obj, "__dlpack_device__"))
        return parse_dlpack(obj, op, consumer, a);
    PyObject *cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
    if (cai) {
        int r = parse_cai(obj, cai, op, a);
        Py_DECREF(cai);
        return r;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return fail(PyExc_TypeError, op, name,
                "must be a GPU array (__cuda_array_interface__ or __dlpack__) or a "
                "manaka.DeviceArray, got %s", Py_TYPE(obj)->tp_name);
}

static int expect_ndim(mk_gpu_array *a, const char *op, int ndim) {
    if (a->ndim == ndim) return 0;
    return fail(PyExc_ValueError, op, a->name, "must have %d dimension%s, got %d", ndim,
                ndim == 1 ? "" : "s", a->ndim);
}

int mk_gpu_expect(mk_gpu_array *a, const char *op, const mk_dtype *dtype, int ndim) {
    if (!a->dtype || a->dtype->npy_type != dtype->npy_type) {
        const char *hint = dtype->npy_type == NPY_INT32
                               ? " on the GPU (convert it there first: x.int() in PyTorch, "
                                 "x.astype(cupy.int32) in CuPy)"
                               : "";
        return fail(PyExc_TypeError, op, a->name, "must have dtype %s%s, got %s", dtype->name,
                    hint, a->dtype ? a->dtype->name : a->typestr);
    }
    return expect_ndim(a, op, ndim);
}

int mk_gpu_expect_index(mk_gpu_array *a, const char *op, int ndim) {
    if (!a->dtype || !PyTypeNum_ISINTEGER(a->dtype->npy_type))
        return fail(PyExc_TypeError, op, a->name, "must have an integer dtype, got %s",
                    a->dtype ? a->dtype->name : a->typestr);
    return expect_ndim(a, op, ndim);
}

int mk_gpu_narrow(mk_gpu_array *a, const char *op) {
    int64_t n = mk_shape_size(a->ndim, a->shape);
    if (a->dtype->npy_type == NPY_INT32 || n == 0) return 0;
    mk_fault bad;
    mk_status status;
    int is_signed = PyTypeNum_ISSIGNED(a->dtype->npy_type);
    Py_BEGIN_ALLOW_THREADS;
    status = mk_cuda_malloc_async((void **)&a->narrowed, (size_t)n * sizeof(int32_t), NULL);
    if (status == MK_OK)
        status = mk_narrow_to_int32_cuda(a->ptr, a->dtype->itemsize, is_signed, n, a->narrowed,
                                         &bad, NULL);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s: %s: %s", op, a->name, mk_error());
        return -1;
    }
    if (bad.kind != MK_FAULT_NONE) return mk_narrow_error(op, a->name, is_signed, &bad);
    a->ptr = a->narrowed;
    a->dtype = &mk_int32;
    return 0;
}

int mk_gpu_current_device(const char *op, int *device) {
    int count;
    mk_status status = mk_cuda_device_count(&count);
    if (status == MK_OK) status = mk_cuda_current_device(device);
    if (status == MK_OK) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s: GPU arrays need a usable CUDA device: %s", op,
                 mk_error());
    return -1;
}

int mk_gpu_attach(mk_gpu_array *a, const char *op, int device, void *stream) {
    mk_status status = MK_OK;
    if (a->ptr && a->device < 0) { /* CAI: ask the driver what the pointer is */
        int kind;
        status = mk_cuda_pointer_info(a->ptr, &kind, &a->device);
        if (status == MK_OK && kind == MK_MEM_HOST)
            return fail(PyExc_ValueError, op, a->name,
                        "points to 0x%llx, which is not CUDA device or managed memory",
                        (unsigned long long)(uintptr_t)a->ptr);
    }
    if (status == MK_OK && a->ptr && a->device != device)
        return fail(PyExc_ValueError, op, a->name,
                    "is on CUDA device %d but the current device is %d; pass arrays on the "
                    "current device", a->device, device);
    if (status == MK_OK && a->has_stream) status = mk_cuda_stream_wait(a->stream, stream);
    if (status != MK_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s: %s: %s", op, a->name, mk_error());
        return -1;
    }
    return 0;
}

void mk_gpu_release(mk_gpu_array *a) {
    /* Stream-ordered: after the kernels that read it. A failure here has no one to tell. */
    if (a->narrowed) (void)mk_cuda_free_async(a->narrowed, NULL);
    a->narrowed = NULL;
    if (a->dl && a->dl->deleter) a->dl->deleter(a->dl);
    a->dl = NULL;
    Py_CLEAR(a->ref);
}
