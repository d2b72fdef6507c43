/* manaka._cuda.device_batch: the arrays of a Batch that lives on the GPU, parsed and
 * attached for a CUDA model's step, which reads them in place (no copy).
 *
 * The rules are the ops' (cuda_binding.h) except that index fields must already be int32:
 * narrowing would be a hidden device copy on another stream, so the message says how to
 * convert. Producers are ordered before the model's copy stream, where the batch check
 * runs and which the step waits for: a DLPack producer is asked for that stream, a CAI v3
 * `stream` is waited for on it, and a manaka.DeviceArray (written by manaka's ops on the
 * legacy default stream) makes it wait for the legacy stream.
 *
 * It returns a manaka._core.Batch with on_device set, made by _core.Batch._in_place from a
 * _DeviceBatch: the holder of every producer (and consumed DLPack tensor), which the Batch
 * keeps as its `owner` and the model binding until the step that reads it has finished.
 * After the step is queued, owner.order_after makes producers that named a CAI stream
 * wait for it. _core reads the struct from the holder's `batch`: a capsule named
 * MK_BATCH_CAPSULE of the mk_batch (core/batch.h) held here, which keeps this object
 * alive; the two extensions share no other layout. */
#include "cuda_binding.h"
#include "core/batch.h"

#define FIELDS 6

typedef struct {
    PyObject_HEAD
    mk_gpu_array a[FIELDS];
    mk_batch batch; /* the arrays as the model reads them: on_device = 1 */
} device_batch_object;

static const char *names[FIELDS] = {"tokens", "legal", "counts", "target", "value", "policy_target"};
static const int ndims[FIELDS] = {3, 2, 1, 1, 1, 2};

static void device_batch_dealloc(device_batch_object *self) {
    for (int i = 0; i < FIELDS; i++) mk_gpu_release(&self->a[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A new capsule each time, holding this object: cached here it would make a cycle between
 * two objects the garbage collector does not track. */
static PyObject *device_batch_capsule(device_batch_object *self, void *closure) {
    return mk_owned_capsule(&self->batch, MK_BATCH_CAPSULE, (PyObject *)self);
}

/* order_after(stream): every producer that named its stream (CAI v3) waits for the work
 * queued so far on `stream` (the model's, an int; 0 = the legacy default stream), so the
 * caller's next write on that stream cannot overtake the step that reads the array. No
 * host wait. (Writes on the legacy default stream are ordered after the step anyway.) */
static PyObject *device_batch_order_after(device_batch_object *self, PyObject *arg) {
    unsigned long long value = PyLong_AsUnsignedLongLong(arg);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    for (int i = 0; i < FIELDS; i++) {
        mk_gpu_array *a = &self->a[i];
        if (!a->name || !a->has_stream) continue;
        mk_status status = mk_cuda_stream_wait((void *)(uintptr_t)value, a->stream);
        if (status != MK_OK) return mk_raise_where(a->name, status);
    }
    Py_RETURN_NONE;
}

static PyMethodDef device_batch_methods[] = {
    {"order_after", (PyCFunction)device_batch_order_after, METH_O,
     "order_after(stream): producers' CAI streams wait for the work queued on `stream`."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef device_batch_getset[] = {
    {"batch", (getter)device_batch_capsule, NULL,
     "the batch for manaka._core: a 'manaka.mk_batch' capsule (its arrays, shapes and device "
     "pointers; NULL for an absent field)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject device_batch_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._cuda._DeviceBatch",
    .tp_basicsize = sizeof(device_batch_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch's GPU arrays, held for the step that reads them.",
    .tp_dealloc = (destructor)device_batch_dealloc,
    .tp_getset = device_batch_getset,
    .tp_methods = device_batch_methods,
};

/* Every array on the current device, its producer ordered before `stream`. */
static int attach_all(device_batch_object *self, const char *op, void *stream) {
    int device, device_array = 0;
    mk_status status;
    if (mk_gpu_current_device(op, &device) < 0) return -1;
    for (int i = 0; i < FIELDS; i++) {
        if (!self->a[i].name) continue;
        if (mk_gpu_attach(&self->a[i], op, device, stream) < 0) return -1;
        device_array |= strcmp(self->a[i].source, "DeviceArray") == 0;
    }
    if (device_array && (status = mk_cuda_stream_wait(NULL, stream)) != MK_OK) {
        mk_raise_where(op, status);
        return -1;
    }
    return 0;
}

static PyObject *core_batch_type; /* manaka._core.Batch */

/* device_batch(op, stream, tokens, legal, counts, target=None, value=None,
 * policy_target=None) -> a _core.Batch on the device. `stream`: the model's copy stream
 * (an int). */
static PyObject *py_device_batch(PyObject *module, PyObject *args) {
    const char *op;
    unsigned long long stream_value;
    PyObject *obj[FIELDS] = {NULL, NULL, NULL, Py_None, Py_None, Py_None};
    if (!PyArg_ParseTuple(args, "sKOOO|OOO:device_batch", &op, &stream_value, &obj[0], &obj[1],
                          &obj[2], &obj[3], &obj[4], &obj[5]))
        return NULL;
    void *stream = (void *)(uintptr_t)stream_value;
    device_batch_object *self = PyObject_New(device_batch_object, &device_batch_type);
    if (!self) return NULL;
    memset(self->a, 0, sizeof self->a);
    memset(&self->batch, 0, sizeof self->batch);
    mk_gpu_array *a = self->a;
    for (int i = 0; i < FIELDS; i++) {
        if (obj[i] == Py_None && i >= 3) continue;
        const mk_dtype *dtype = i < 4 ? &mk_int32 : &mk_float32;
        if (mk_gpu_parse(obj[i], op, names[i], stream, &a[i]) < 0 ||
            mk_gpu_expect(&a[i], op, dtype, ndims[i]) < 0)
            goto fail;
    }
    int64_t B = a[0].shape[0];
    for (int i = 1; i < FIELDS; i++)
        if (a[i].name && mk_expect_rows(op, a[i].name, a[i].shape[0], B) < 0) goto fail;
    if (a[5].name && mk_expect_soft_columns(op, a[5].shape[1], a[1].shape[1]) < 0) goto fail;
    if (attach_all(self, op, stream) < 0) goto fail;
    self->batch = (mk_batch){.B = B, .S = a[0].shape[1], .T = a[0].shape[2], .L = a[1].shape[1],
                             .tokens = a[0].ptr, .legal = a[1].ptr, .counts = a[2].ptr,
                             .target = a[3].ptr, .value = a[4].ptr, .policy_target = a[5].ptr,
                             .on_device = 1};
    PyObject *batch = PyObject_CallMethod(core_batch_type, "_in_place", "sO", op, self);
    Py_DECREF(self);
    return batch;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyMethodDef batch_methods[] = {
    {"device_batch", py_device_batch, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_cuda_batch(PyObject *module) {
    if (PyType_Ready(&device_batch_type) < 0) return -1;
    PyObject *core = PyImport_ImportModule("manaka._core");
    if (!core) return -1;
    core_batch_type = PyObject_GetAttrString(core, "Batch");
    Py_DECREF(core);
    if (!core_batch_type) return -1;
    return PyModule_AddFunctions(module, batch_methods);
}
