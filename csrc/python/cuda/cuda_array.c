/* manaka.DeviceArray: a C-contiguous array in CUDA device memory, as returned by every op
 * on the GPU. It exports __cuda_array_interface__ (v3) and __dlpack__/__dlpack_device__,
 * so torch.from_dlpack(x) and cupy.asarray(x) take it without a copy. The memory is freed
 * when the last reference goes, exported DLPack capsules included (each holds one). */
#include "cuda_binding.h"

/* ------------------------------------------------------------------ dtypes */
static const mk_dtype dtypes[] = {
    {"float32", "<f4", 4, NPY_FLOAT32, kDLFloat}, {"int32", "<i4", 4, NPY_INT32, kDLInt},
    {"float16", "<f2", 2, NPY_FLOAT16, kDLFloat}, {"float64", "<f8", 8, NPY_FLOAT64, kDLFloat},
    {"int8", "|i1", 1, NPY_INT8, kDLInt},         {"int16", "<i2", 2, NPY_INT16, kDLInt},
    {"int64", "<i8", 8, NPY_INT64, kDLInt},       {"uint8", "|u1", 1, NPY_UINT8, kDLUInt},
    {"uint16", "<u2", 2, NPY_UINT16, kDLUInt},    {"uint32", "<u4", 4, NPY_UINT32, kDLUInt},
    {"uint64", "<u8", 8, NPY_UINT64, kDLUInt},    {"bool", "|b1", 1, NPY_BOOL, kDLBool},
};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])
const mk_dtype mk_float32 = {"float32", "<f4", 4, NPY_FLOAT32, kDLFloat};
const mk_dtype mk_int32 = {"int32", "<i4", 4, NPY_INT32, kDLInt};

const mk_dtype *mk_dtype_from_typestr(const char *typestr) {
    /* '<' little-endian, '|' not applicable, '=' native (manaka builds for little-endian) */
    if (!typestr[0] || !strchr("<|=", typestr[0])) return NULL;
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (strcmp(typestr + 1, dtypes[i].typestr + 1) == 0) return &dtypes[i];
    return NULL;
}

const mk_dtype *mk_dtype_from_dlpack(DLDataType t) {
    if (t.lanes != 1) return NULL;
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (dtypes[i].dl_code == t.code && dtypes[i].itemsize * 8 == t.bits) return &dtypes[i];
    return NULL;
}

const mk_dtype *mk_dtype_from_npy(int npy_type) {
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (dtypes[i].npy_type == npy_type) return &dtypes[i];
    return NULL;
}

int64_t mk_shape_size(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int mk_shape_check(int ndim, const int64_t *shape, const char *where, const char *name) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (mk_mul_too_big(n, shape[i], &n)) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s has more than 2^56 elements (shape[%d] = %lld after %d "
                         "dimension%s)",
                         where, name, i, (long long)shape[i], i, i == 1 ? "" : "s");
            return -1;
        }
    return 0;
}

/* ------------------------------------------------------------------ argument helpers */

/* shape: an int or a sequence of non-negative ints. */
static int parse_shape(PyObject *obj, const char *where, int *ndim, int64_t *shape) {
    if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        *ndim = 1;
        shape[0] = PyLong_AsLongLong(obj);
        if (shape[0] == -1 && PyErr_Occurred()) return -1;
    } else {
        PyObject *seq = PySequence_Check(obj) ? PySequence_Fast(obj, "") : NULL;
        if (!seq) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: shape must be an int or a sequence of ints, got %s",
                         where, Py_TYPE(obj)->tp_name);
            return -1;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > MK_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "%s: at most %d dimensions are supported, got %zd",
                         where, MK_MAX_DIMS, n);
            Py_DECREF(seq);
            return -1;
        }
        *ndim = (int)n;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyLong_Check(item) || PyBool_Check(item)) {
                PyErr_Format(PyExc_TypeError, "%s: shape[%zd] must be an int, got %s", where, i,
                             Py_TYPE(item)->tp_name);
                Py_DECREF(seq);
                return -1;
            }
            shape[i] = PyLong_AsLongLong(item);
            if (shape[i] == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
        }
        Py_DECREF(seq);
    }
    for (int i = 0; i < *ndim; i++)
        if (shape[i] < 0) {
            PyErr_Format(PyExc_ValueError, "%s: shape[%d] must be >= 0, got %lld", where, i,
                         (long long)shape[i]);
            return -1;
        }
    return mk_shape_check(*ndim, shape, where, "the shape"); /* bytes = size * itemsize */
}

/* dtype: anything numpy.dtype() accepts, if DeviceArray supports it. */
static const mk_dtype *parse_dtype(PyObject *obj, const char *where) {
    PyArray_Descr *descr = NULL;
    if (!PyArray_DescrConverter(obj, &descr)) return NULL;
    const mk_dtype *dt = PyArray_ISNBO(descr->byteorder) ? mk_dtype_from_npy(descr->type_num) : NULL;
    if (!dt) {
        PyObject *s = PyObject_Str((PyObject *)descr);
        PyErr_Format(PyExc_TypeError,
                     "%s: dtype %S is not supported (float16/32/64, int8/16/32/64, uint8/16/32/64, bool)",
                     where, s);
        Py_XDECREF(s);
    }
    Py_DECREF(descr);
    return dt;
}

/* ------------------------------------------------------------------ construction */

static mk_device_array *alloc_array(int ndim, const int64_t *shape, const mk_dtype *dtype) {
    mk_device_array *self = PyObject_New(mk_device_array, &mk_DeviceArray_Type);
    if (!self) return NULL;
    self->ptr = NULL;
    self->ndim = ndim;
    for (int i = 0; i < ndim; i++) self->shape[i] = shape[i];
    self->dtype = dtype;
    self->device = -1;
    self->readonly = 0;
    self->owns = 0;
    self->owner = NULL;
    return self;
}

mk_device_array *mk_device_array_empty(int ndim, const int64_t *shape, const mk_dtype *dtype) {
    size_t bytes = (size_t)mk_shape_size(ndim, shape) * (size_t)dtype->itemsize;
    int device;
    mk_status status = mk_cuda_current_device(&device);
    if (status != MK_OK) return (mk_device_array *)mk_raise_where("DeviceArray", status);
    mk_device_array *self = alloc_array(ndim, shape, dtype);
    if (!self) return NULL;
    self->device = device;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_cuda_malloc(&self->ptr, bytes);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        Py_DECREF(self);
        return (mk_device_array *)mk_raise_where("DeviceArray", status);
    }
    self->owns = 1;
    return self;
}

static void array_dealloc(mk_device_array *self) {
    if (self->owns && self->ptr) {
        mk_status status;
        Py_BEGIN_ALLOW_THREADS;
        status = mk_cuda_free(self->ptr);
        Py_END_ALLOW_THREADS;
        if (status != MK_OK) {
            PyErr_Format(PyExc_RuntimeError, "DeviceArray: freeing device memory: %s", mk_error());
            PyErr_WriteUnraisable((PyObject *)self);
        }
    }
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static PyObject *array_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyErr_SetString(PyExc_TypeError,
                    "DeviceArray cannot be created directly: use DeviceArray.empty(shape, dtype), "
                    "DeviceArray.from_numpy(a) or DeviceArray.from_ptr(ptr, shape, dtype)");
    return NULL;
}

static PyObject *array_empty(PyObject *cls, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"shape", "dtype", NULL};
    PyObject *shape_o, *dtype_o = NULL;
    int ndim;
    int64_t shape[MK_MAX_DIMS];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:empty", kwlist, &shape_o, &dtype_o))
        return NULL;
    if (parse_shape(shape_o, "DeviceArray.empty", &ndim, shape) < 0) return NULL;
    const mk_dtype *dt = dtype_o ? parse_dtype(dtype_o, "DeviceArray.empty") : &mk_float32;
    if (!dt) return NULL;
    return (PyObject *)mk_device_array_empty(ndim, shape, dt);
}

static PyObject *array_from_numpy(PyObject *cls, PyObject *a) {
    if (!PyArray_Check(a)) {
        PyErr_Format(PyExc_TypeError, "DeviceArray.from_numpy: a must be a NumPy array, got %s",
                     Py_TYPE(a)->tp_name);
        return NULL;
    }
    const mk_dtype *dt = parse_dtype((PyObject *)PyArray_DESCR((PyArrayObject *)a), "DeviceArray.from_numpy");
    if (!dt) return NULL;
    if (PyArray_NDIM((PyArrayObject *)a) > MK_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "DeviceArray.from_numpy: at most %d dimensions", MK_MAX_DIMS);
        return NULL;
    }
    PyArrayObject *c = (PyArrayObject *)PyArray_FROM_OTF(a, dt->npy_type, NPY_ARRAY_IN_ARRAY);
    if (!c) return NULL;
    int64_t shape[MK_MAX_DIMS];
    for (int i = 0; i < PyArray_NDIM(c); i++) shape[i] = PyArray_DIM(c, i);
    mk_device_array *out = mk_device_array_empty(PyArray_NDIM(c), shape, dt);
    if (out) {
        mk_status status;
        Py_BEGIN_ALLOW_THREADS;
        status = mk_cuda_copy_to_device(out->ptr, PyArray_DATA(c), (size_t)PyArray_NBYTES(c));
        Py_END_ALLOW_THREADS;
        if (status != MK_OK) {
            Py_CLEAR(out);
            mk_raise_where("DeviceArray.from_numpy", status);
        }
    }
    Py_DECREF(c);
    return (PyObject *)out;
}

static PyObject *array_from_ptr(PyObject *cls, PyObject *args, PyObject *kw) {
    static const char where[] = "DeviceArray.from_ptr";
    static char *kwlist[] = {"ptr", "shape", "dtype", "owner", "readonly", NULL};
    PyObject *ptr_o, *shape_o, *dtype_o, *owner = Py_None;
    int readonly = 0, ndim, kind, device;
    int64_t shape[MK_MAX_DIMS];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O$p:from_ptr", kwlist, &ptr_o, &shape_o,
                                     &dtype_o, &owner, &readonly))
        return NULL;
    if (!PyLong_Check(ptr_o) || PyBool_Check(ptr_o)) {
        PyErr_Format(PyExc_TypeError, "%s: ptr must be an int (a device address), got %s", where,
                     Py_TYPE(ptr_o)->tp_name);
        return NULL;
    }
    unsigned long long address = PyLong_AsUnsignedLongLong(ptr_o);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: ptr must be a non-negative 64-bit address", where);
        return NULL;
    }
    if (parse_shape(shape_o, where, &ndim, shape) < 0) return NULL;
    const mk_dtype *dt = parse_dtype(dtype_o, where);
    if (!dt) return NULL;
    int64_t size = mk_shape_size(ndim, shape);
    if (address == 0 && size > 0) {
        PyErr_Format(PyExc_ValueError, "%s: ptr is 0 (NULL) for a non-empty array", where);
        return NULL;
    }
    if (address % (unsigned long long)dt->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: ptr %p is not aligned to its %s items", where,
                     (void *)(uintptr_t)address, dt->name);
        return NULL;
    }
    /* Only now touch the device: what memory is this? */
    mk_status status = mk_cuda_current_device(&device);
    if (status == MK_OK && address) status = mk_cuda_pointer_info((void *)(uintptr_t)address, &kind, &device);
    if (status != MK_OK) return mk_raise_where(where, status);
    if (address && kind == MK_MEM_HOST) {
        PyErr_Format(PyExc_ValueError,
                     "%s: ptr %p is not CUDA device or managed memory (a host address?)",
                     where, (void *)(uintptr_t)address);
        return NULL;
    }
    mk_device_array *self = alloc_array(ndim, shape, dt);
    if (!self) return NULL;
    self->ptr = (void *)(uintptr_t)address;
    self->device = device;
    self->readonly = readonly;
    if (owner != Py_None) {
        Py_INCREF(owner);
        self->owner = owner;
    }
    return (PyObject *)self;
}

/* ------------------------------------------------------------------ methods */

static PyObject *array_numpy(mk_device_array *self, PyObject *unused) {
    npy_intp dims[MK_MAX_DIMS];
    for (int i = 0; i < self->ndim; i++) dims[i] = (npy_intp)self->shape[i];
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(self->ndim, dims, self->dtype->npy_type);
    if (!out) return NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_cuda_copy_to_host(PyArray_DATA(out), self->ptr, (size_t)PyArray_NBYTES(out));
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        Py_DECREF(out);
        return mk_raise_where("DeviceArray.numpy", status);
    }
    return (PyObject *)out;
}

/* np.asarray(x) would otherwise make a 0-d object array without a word: refuse, as CuPy
 * does, since a device-to-host copy should be asked for. */
static PyObject *array_array(mk_device_array *self, PyObject *args, PyObject *kw) {
    PyErr_SetString(PyExc_TypeError,
                    "a DeviceArray lives in GPU memory: use .numpy() to copy it to the host");
    return NULL;
}

static PyObject *shape_tuple(mk_device_array *self) {
    PyObject *t = PyTuple_New(self->ndim);
    for (int i = 0; t && i < self->ndim; i++) {
        PyObject *v = PyLong_FromLongLong(self->shape[i]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *get_shape(mk_device_array *self, void *c) { return shape_tuple(self); }
static PyObject *get_ndim(mk_device_array *self, void *c) { return PyLong_FromLong(self->ndim); }
static PyObject *get_size(mk_device_array *self, void *c) {
    return PyLong_FromLongLong(mk_shape_size(self->ndim, self->shape));
}
static PyObject *get_nbytes(mk_device_array *self, void *c) {
    return PyLong_FromLongLong(mk_shape_size(self->ndim, self->shape) * self->dtype->itemsize);
}
static PyObject *get_dtype(mk_device_array *self, void *c) {
    return (PyObject *)PyArray_DescrFromType(self->dtype->npy_type);
}
static PyObject *get_device(mk_device_array *self, void *c) { return PyLong_FromLong(self->device); }
static PyObject *get_ptr(mk_device_array *self, void *c) {
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->ptr);
}
static PyObject *get_readonly(mk_device_array *self, void *c) { return PyBool_FromLong(self->readonly); }

/* Version 3; the data is ready in the order of the legacy default stream (1), where every
 * manaka kernel runs, so a consumer on another stream waits for it. */
static PyObject *get_cai(mk_device_array *self, void *c) {
    PyObject *shape = shape_tuple(self);
    if (!shape) return NULL;
    return Py_BuildValue("{s:N,s:s,s:[(s,s)],s:(K,O),s:O,s:i,s:i}", "shape", shape, "typestr",
                         self->dtype->typestr, "descr", "", self->dtype->typestr, "data",
                         (unsigned long long)(uintptr_t)self->ptr,
                         self->readonly ? Py_True : Py_False, "strides", Py_None, "version", 3,
                         "stream", 1);
}

static PyObject *array_dlpack_device(mk_device_array *self, PyObject *unused) {
    return Py_BuildValue("(ii)", kDLCUDA, self->device);
}

typedef struct {
    DLManagedTensor tensor;
    int64_t shape[MK_MAX_DIMS];
    int64_t strides[MK_MAX_DIMS]; /* explicit, in elements: some consumers refuse NULL */
} exported;

static void exported_deleter(DLManagedTensor *t) {
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_XDECREF((PyObject *)t->manager_ctx);
        PyGILState_Release(gil);
    }
    PyMem_RawFree(t);
}

/* A capsule nobody consumed still owns its tensor. */
static void capsule_destructor(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        DLManagedTensor *t = PyCapsule_GetPointer(capsule, "dltensor");
        if (t && t->deleter) t->deleter(t);
    }
}

static PyObject *array_dlpack(mk_device_array *self, PyObject *args, PyObject *kw) {
    static const char where[] = "DeviceArray.__dlpack__";
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream_o = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO", kwlist, &stream_o, &max_version,
                                     &dl_device, &copy))
        return NULL;
    if (copy == Py_True) {
        PyErr_Format(PyExc_BufferError, "%s: copy=True is not supported (export is zero-copy)", where);
        return NULL;
    }
    if (dl_device != Py_None) {
        int type, id;
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id)) return NULL;
        if (type != kDLCUDA || id != self->device) {
            PyErr_Format(PyExc_BufferError, "%s: the array is on CUDA device %d, not (%d, %d)",
                         where, self->device, type, id);
            return NULL;
        }
    }
    /* stream: None or 1 = the legacy default stream (ours: nothing to do), -1 = no
     * synchronisation wanted, anything else = the consumer's stream, made to wait for
     * the work queued on ours. */
    if (stream_o != Py_None) {
        long long stream = PyLong_AsLongLong(stream_o);
        if (stream == -1 && PyErr_Occurred()) return NULL;
        if (stream == 0) { /* the protocol forbids it: legacy or per-thread default? */
            PyErr_Format(PyExc_ValueError,
                         "%s: stream=0 is ambiguous and not allowed by the DLPack protocol; "
                         "pass 1 for the legacy default stream or 2 for the per-thread one",
                         where);
            return NULL;
        }
        if (stream != -1 && stream != 1) {
            mk_status status = mk_cuda_stream_wait(NULL, (void *)(intptr_t)stream);
            if (status != MK_OK) return mk_raise_where(where, status);
        }
    }
    exported *e = PyMem_RawCalloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    int64_t stride = 1;
    for (int i = self->ndim - 1; i >= 0; i--) {
        e->shape[i] = self->shape[i];
        e->strides[i] = stride;
        stride *= self->shape[i] > 0 ? self->shape[i] : 1;
    }
    DLTensor *t = &e->tensor.dl_tensor;
    t->data = self->ptr;
    t->device.device_type = kDLCUDA;
    t->device.device_id = self->device;
    t->ndim = self->ndim;
    t->dtype.code = self->dtype->dl_code;
    t->dtype.bits = (uint8_t)(self->dtype->itemsize * 8);
    t->dtype.lanes = 1;
    t->shape = e->shape;
    t->strides = e->strides; /* C-contiguous */
    t->byte_offset = 0;
    e->tensor.manager_ctx = self;
    e->tensor.deleter = exported_deleter;
    Py_INCREF(self);
    PyObject *capsule = PyCapsule_New(&e->tensor, "dltensor", capsule_destructor);
    if (!capsule) exported_deleter(&e->tensor);
    return capsule;
}

static PyObject *array_repr(mk_device_array *self) {
    PyObject *shape = shape_tuple(self);
    if (!shape) return NULL;
    PyObject *r = PyUnicode_FromFormat("DeviceArray(shape=%R, dtype=%s, device='cuda:%d'%s)", shape,
                                       self->dtype->name, self->device,
                                       self->readonly ? ", readonly=True" : "");
    Py_DECREF(shape);
    return r;
}

static PyMethodDef array_methods[] = {
    {"empty", (PyCFunction)(void (*)(void))array_empty, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "empty(shape, dtype=float32) -> a new, uninitialised DeviceArray on the current device."},
    {"from_numpy", (PyCFunction)array_from_numpy, METH_O | METH_CLASS,
     "from_numpy(a) -> a DeviceArray holding a copy of NumPy array a."},
    {"from_ptr", (PyCFunction)(void (*)(void))array_from_ptr, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_ptr(ptr, shape, dtype, owner=None, *, readonly=False) -> a DeviceArray viewing C-contiguous\n"
     "device memory at address ptr, without a copy. The memory is not freed by manaka; `owner`\n"
     "(any object) is kept alive as long as the DeviceArray."},
    {"numpy", (PyCFunction)array_numpy, METH_NOARGS, "numpy() -> a NumPy copy of the array."},
    {"__array__", (PyCFunction)(void (*)(void))array_array, METH_VARARGS | METH_KEYWORDS,
     "Refuses implicit conversion: use numpy()."},
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack export (zero-copy); stream as in the array API standard."},
    {"__dlpack_device__", (PyCFunction)array_dlpack_device, METH_NOARGS, "(2, device): CUDA."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef array_getset[] = {
    {"shape", (getter)get_shape, NULL, "tuple of ints", NULL},
    {"ndim", (getter)get_ndim, NULL, "number of dimensions", NULL},
    {"size", (getter)get_size, NULL, "number of elements", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "bytes of device memory", NULL},
    {"dtype", (getter)get_dtype, NULL, "numpy.dtype of the elements", NULL},
    {"device", (getter)get_device, NULL, "CUDA device ordinal", NULL},
    {"ptr", (getter)get_ptr, NULL, "device address of the first element", NULL},
    {"readonly", (getter)get_readonly, NULL, "whether writes are refused", NULL},
    {"__cuda_array_interface__", (getter)get_cai, NULL, "CUDA Array Interface, version 3", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject mk_DeviceArray_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka.DeviceArray",
    .tp_basicsize = sizeof(mk_device_array),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A C-contiguous array in CUDA device memory (what manaka's GPU ops return).\n\n"
              "Exports __cuda_array_interface__ (v3) and __dlpack__, so torch.from_dlpack(x)\n"
              "and cupy.asarray(x) view it without a copy; .numpy() copies it to the host.",
    .tp_new = array_new,
    .tp_dealloc = (destructor)array_dealloc,
    .tp_repr = (reprfunc)array_repr,
    .tp_methods = array_methods,
    .tp_getset = array_getset,
};

int mk_init_device_array(PyObject *module) {
    if (PyType_Ready(&mk_DeviceArray_Type) < 0) return -1;
    return PyModule_AddObjectRef(module, "DeviceArray", (PyObject *)&mk_DeviceArray_Type);
}
