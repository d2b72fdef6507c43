/* _core.Batch: one batch as every model and trainer entry takes it (manaka.Batch is its
 * Python face). Made three ways:
 * - from arrays (Batch(tokens, legal, counts, target, value, policy_target=None)): each
 *   NumPy field converted once to C-contiguous int32 / float32 (the array itself when it
 *   is one already; an integer that int32 cannot hold is a ValueError, never wrapped),
 *   the rows and soft-target columns of the NumPy fields compared; GPU arrays
 *   (__cuda_array_interface__, __dlpack_device__) kept as given, for a CUDA model;
 * - by a loader's next() (loader_binding.c): the fields are read-only views of the slot
 *   its producer packed and checked; while the slot is held and the views are unchanged
 *   the model reads the slot's mk_batch as it is (mk_loaded_batch);
 * - by _in_place (manaka._cuda.device_batch, or a test posing host memory as a device's):
 *   an mk_batch already in a device backend's memory, from a MK_BATCH_CAPSULE capsule,
 *   its arrays kept alive by `owner`.
 * Assigning a field converts it the same way and ends the loader's claim; shapes are
 * compared again where the batch is read, since fields are replaced one at a time.
 *
 * mk_batch_take turns a Batch into the mk_batch a call reads. Host index arrays are read
 * through a private copy made there (mk_index_arg: no other thread can change an index
 * between its check and its use), float arrays in place. */
#include "model_binding.h"

static const char *field_names[MK_BATCH_FIELDS] = {"tokens", "legal",  "counts",
                                                   "target", "value", "policy_target"};
static const int field_ndims[MK_BATCH_FIELDS] = {3, 2, 1, 1, 1, 2};

static int is_gpu_array(PyObject *obj) {
    return !PyArray_Check(obj) && (PyObject_HasAttrString(obj, "__cuda_array_interface__") ||
                                   PyObject_HasAttrString(obj, "__dlpack_device__"));
}

/* Field i as stored: a GPU array as given, else a converted NumPy array (new reference). */
static PyObject *convert_field(int i, PyObject *obj) {
    if (obj != Py_None && is_gpu_array(obj)) return Py_NewRef(obj);
    return (PyObject *)(i < 4 ? mk_int32_arg(obj, "Batch", field_names[i], field_ndims[i], 0)
                              : mk_float32_arg(obj, "Batch", field_names[i], field_ndims[i]));
}

/* The rows of the NumPy fields among field[0 .. n) agree with tokens' (field[0], when it is
 * one), policy_target's columns with legal's: 0, or -1 with a ValueError naming `op`. */
static int host_shapes(const char *op, PyObject *const *field, int n) {
#define HOST(i) (field[i] && PyArray_Check(field[i]))
#define DIM(i, d) PyArray_DIM((PyArrayObject *)field[i], d)
    for (int i = 1; HOST(0) && i < n; i++)
        if (HOST(i) && mk_expect_rows(op, field_names[i], DIM(i, 0), DIM(0, 0)) < 0) return -1;
    if (n > 5 && HOST(1) && HOST(5) && mk_expect_soft_columns(op, DIM(5, 1), DIM(1, 1)) < 0)
        return -1;
    return 0;
#undef HOST
#undef DIM
}

static int batch_init(mk_batch_object *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"tokens", "legal", "counts", "target", "value", "policy_target", NULL};
    PyObject *given[MK_BATCH_FIELDS] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    PyObject *field[MK_BATCH_FIELDS] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO|O:Batch", kw, &given[0], &given[1],
                                     &given[2], &given[3], &given[4], &given[5]))
        return -1;
    for (int i = 0; i < MK_BATCH_FIELDS; i++)
        if (!(i == 5 && given[i] == Py_None) && !(field[i] = convert_field(i, given[i])))
            goto fail;
    if (host_shapes("Batch", field, MK_BATCH_FIELDS) < 0) goto fail;
    for (int i = 0; i < MK_BATCH_FIELDS; i++) Py_XSETREF(self->field[i], field[i]);
    Py_CLEAR(self->loader);
    Py_CLEAR(self->owner);
    return 0;
fail:
    for (int i = 0; i < MK_BATCH_FIELDS; i++) Py_XDECREF(field[i]);
    return -1;
}

static int batch_traverse(mk_batch_object *self, visitproc visit, void *arg) {
    for (int i = 0; i < MK_BATCH_FIELDS; i++) Py_VISIT(self->field[i]);
    Py_VISIT(self->loader);
    Py_VISIT(self->owner);
    return 0;
}

static int batch_clear(mk_batch_object *self) {
    for (int i = 0; i < MK_BATCH_FIELDS; i++) Py_CLEAR(self->field[i]);
    Py_CLEAR(self->loader);
    Py_CLEAR(self->owner);
    return 0;
}

static void batch_dealloc(mk_batch_object *self) {
    PyObject_GC_UnTrack(self);
    batch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *get_field(mk_batch_object *self, void *i) {
    PyObject *f = self->field[(intptr_t)i];
    return Py_NewRef(f ? f : Py_None);
}

static int set_field(mk_batch_object *self, PyObject *value, void *closure) {
    int i = (int)(intptr_t)closure;
    if (!value) {
        PyErr_Format(PyExc_AttributeError, "Batch: %s cannot be deleted", field_names[i]);
        return -1;
    }
    PyObject *f = i == 5 && value == Py_None ? NULL : convert_field(i, value);
    if (!f && PyErr_Occurred()) return -1;
    Py_XSETREF(self->field[i], f);
    Py_CLEAR(self->loader); /* no longer the producer's batch */
    return 0;
}

/* 0 when fields[0..n) that are present are all NumPy arrays, 1 (the first GPU field in
 * *first) when all are GPU arrays, -1 with a TypeError naming `op` when they mix. */
static int gpu_fields(const char *op, mk_batch_object *b, int n, int *first) {
    char host[96] = "", gpu[96] = "";
    int hosts = 0, gpus = 0;
    for (int i = 0; i < n; i++) {
        if (!b->field[i]) continue;
        int g = !PyArray_Check(b->field[i]);
        char *list = g ? gpu : host;
        if (g && !gpus) *first = i;
        snprintf(list + strlen(list), 96 - strlen(list), "%s%s", (g ? gpus : hosts) ? ", " : "",
                 field_names[i]);
        g ? gpus++ : hosts++;
    }
    if (gpus && hosts) {
        PyErr_Format(PyExc_TypeError,
                     "%s: the batch mixes host and GPU arrays (%s on the host, %s on the GPU); "
                     "pass every field on the same device",
                     op, host, gpu);
        return -1;
    }
    return gpus > 0;
}

/* _on_gpu(op, targets) -> whether the fields a call reads (tokens, legal, counts, and with
 * `targets` the rest) are GPU arrays; a TypeError naming `op` when they mix. */
static PyObject *batch_on_gpu(mk_batch_object *self, PyObject *args) {
    const char *op;
    int targets, first;
    if (!PyArg_ParseTuple(args, "sp", &op, &targets)) return NULL;
    int g = gpu_fields(op, self, targets ? MK_BATCH_FIELDS : 3, &first);
    return g < 0 ? NULL : PyBool_FromLong(g);
}

void mk_batch_release(mk_batch_hold *hold) {
    for (int i = 0; i < MK_BATCH_FIELDS; i++) Py_CLEAR(hold->a[i]);
    Py_CLEAR(hold->owner);
    mk_loaded_batch_unpin(hold->pin);
    hold->pin = NULL;
}

int mk_batch_take(const char *op, PyObject *obj, int with_targets, const char *device,
                  mk_batch_hold *hold, mk_batch *out) {
    memset(hold, 0, sizeof *hold);
    memset(out, 0, sizeof *out);
    if (!PyObject_TypeCheck(obj, &mk_batch_type)) {
        PyErr_Format(PyExc_TypeError, "%s: batch must be a manaka.Batch, got %s", op,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    mk_batch_object *b = (mk_batch_object *)obj;
    int n = with_targets ? MK_BATCH_FIELDS : 3, first = 0, taken = 0;
    if (b->owner) { /* in the backend's memory, and checked there */
        *out = b->batch;
        hold->owner = Py_NewRef(b->owner);
    } else if (b->loader && (taken = mk_loaded_batch(b, out, &hold->pin)) != 0) {
        if (taken < 0) return -1;
    } else {
        int g = gpu_fields(op, b, n, &first);
        if (g) {
            if (g > 0)
                PyErr_Format(PyExc_TypeError,
                             "%s: batch.%s is a GPU array (%s) but the model is on '%s'; pass "
                             "NumPy arrays, or use a Model(device='cuda')",
                             op, field_names[first], Py_TYPE(b->field[first])->tp_name, device);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            if (i == 5 && !b->field[5]) break;
            PyObject *f = b->field[i] ? b->field[i] : Py_None;
            if (!(hold->a[i] = i < 4 ? mk_index_arg(f, op, field_names[i], field_ndims[i])
                                     : mk_float_arg(f, op, field_names[i], field_ndims[i])))
                goto fail;
        }
        PyArrayObject **a = hold->a;
        if (host_shapes(op, (PyObject **)a, n) < 0) goto fail;
        *out = (mk_batch){.B = PyArray_DIM(a[0], 0), .S = PyArray_DIM(a[0], 1),
                          .T = PyArray_DIM(a[0], 2), .L = PyArray_DIM(a[1], 1)};
        const void **data[MK_BATCH_FIELDS] = {
            (const void **)&out->tokens, (const void **)&out->legal,
            (const void **)&out->counts, (const void **)&out->target,
            (const void **)&out->value,  (const void **)&out->policy_target};
        for (int i = 0; i < n; i++) *data[i] = a[i] ? PyArray_DATA(a[i]) : NULL;
    }
    if (!with_targets) out->target = NULL, out->value = NULL, out->policy_target = NULL;
    return 0;
fail:
    mk_batch_release(hold);
    return -1;
}

/* _in_place(op, holder) -> a Batch over the mk_batch of holder.batch, a capsule named
 * MK_BATCH_CAPSULE (a TypeError naming `op` for anything else, before any pointer is
 * read), whose arrays are in a device backend's memory; the Batch keeps `holder`, which
 * keeps the arrays alive. */
static PyObject *in_place(PyTypeObject *cls, PyObject *args) {
    const char *op;
    PyObject *holder;
    if (!PyArg_ParseTuple(args, "sO:_in_place", &op, &holder)) return NULL;
    PyObject *capsule = PyObject_GetAttrString(holder, "batch");
    if (!capsule) return NULL;
    const mk_batch *src = PyCapsule_IsValid(capsule, MK_BATCH_CAPSULE)
                              ? PyCapsule_GetPointer(capsule, MK_BATCH_CAPSULE)
                              : NULL;
    mk_batch_object *self = NULL;
    if (!src) {
        const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: a device batch's .batch must be a '%s' capsule (from "
                     "manaka._cuda.device_batch), got %s%s%s",
                     op, MK_BATCH_CAPSULE, Py_TYPE(capsule)->tp_name, name ? " named " : "",
                     name ? name : "");
    } else if ((self = (mk_batch_object *)cls->tp_alloc(cls, 0))) {
        self->batch = *src;
        self->batch.on_device = 1; /* whatever the struct says: checked on the device */
        self->batch.checked_V = self->batch.checked_M = 0;
        self->owner = Py_NewRef(holder);
    }
    Py_DECREF(capsule);
    return (PyObject *)self;
}

static PyObject *batch_is_on_device(mk_batch_object *self, void *closure) {
    return PyBool_FromLong(self->owner != NULL);
}
static PyObject *batch_owner(mk_batch_object *self, void *closure) {
    return Py_NewRef(self->owner ? self->owner : Py_None);
}
static PyObject *batch_producer_checked(mk_batch_object *self, void *closure) {
    int own = self->loader != NULL;
    return Py_BuildValue("(LL)", own ? (long long)self->batch.checked_V : 0LL,
                         own ? (long long)self->batch.checked_M : 0LL);
}
static PyObject *batch_in_slot(mk_batch_object *self, void *closure) {
    return PyBool_FromLong(self->loader && mk_loaded_batch_current(self));
}

/* check_batch(op, num_tokens, num_moves, tokens_per_side, batch) -> None: the checks
 * Model.loss_and_grad makes of a host batch, with its exception and words naming `op`.
 * For code that computes the loss elsewhere (manaka.torch.Network.loss). */
static PyObject *py_check_batch(PyObject *module, PyObject *args) {
    const char *op;
    long long V, M, T;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "sLLLO:check_batch", &op, &V, &M, &T, &obj)) return NULL;
    mk_batch_hold hold;
    mk_batch batch;
    if (mk_batch_take(op, obj, 1, "cpu", &hold, &batch) < 0) return NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS; /* the message is thread-local (error.c) */
    status = mk_batch_check(op, &batch, V, M, T, 1);
    Py_END_ALLOW_THREADS;
    mk_batch_release(&hold);
    if (status != MK_OK) return mk_raise_status(status);
    Py_RETURN_NONE;
}

static PyGetSetDef batch_getset[] = {
    {"tokens", (getter)get_field, (setter)set_field, "int32 [B, 2, T]", (void *)0},
    {"legal", (getter)get_field, (setter)set_field, "int32 [B, L]", (void *)1},
    {"counts", (getter)get_field, (setter)set_field, "int32 [B]", (void *)2},
    {"target", (getter)get_field, (setter)set_field, "int32 [B]", (void *)3},
    {"value", (getter)get_field, (setter)set_field, "float32 [B]", (void *)4},
    {"policy_target", (getter)get_field, (setter)set_field, "float32 [B, L] or None",
     (void *)5},
    {"on_device", (getter)batch_is_on_device, NULL,
     "True for a batch already in a device backend's memory (manaka._cuda.device_batch)",
     NULL},
    {"owner", (getter)batch_owner, NULL,
     "what keeps an on-device batch's arrays alive (None for any other batch)", NULL},
    {"producer_checked", (getter)batch_producer_checked, NULL,
     "(num_tokens, num_moves) a loader's producer checked this batch against, (0, 0) if it "
     "found a fault, had no vocabularies, or the batch is not (any more) the loader's",
     NULL},
    {"in_slot", (getter)batch_in_slot, NULL,
     "whether a model reads this loader batch in its slot: the loader has not moved on "
     "and no field was replaced",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef batch_methods[] = {
    {"_on_gpu", (PyCFunction)batch_on_gpu, METH_VARARGS,
     "_on_gpu(op, targets) -> whether the fields a call reads are GPU arrays"},
    {"_in_place", (PyCFunction)in_place, METH_VARARGS | METH_CLASS,
     "_in_place(op, holder) -> a Batch over holder.batch, a 'manaka.mk_batch' capsule"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef module_functions[] = {
    {"check_batch", py_check_batch, METH_VARARGS,
     "check_batch(op, num_tokens, num_moves, tokens_per_side, batch) -> None, or "
     "Model.loss_and_grad's error for this batch"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject mk_batch_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._core.Batch",
    .tp_basicsize = sizeof(mk_batch_object),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One batch as the model and trainer read it (use manaka.Batch).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)batch_init,
    .tp_traverse = (traverseproc)batch_traverse,
    .tp_clear = (inquiry)batch_clear,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_getset = batch_getset,
    .tp_methods = batch_methods,
};

int mk_init_batch(PyObject *module) {
    if (PyType_Ready(&mk_batch_type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Batch", (PyObject *)&mk_batch_type) < 0) return -1;
    return PyModule_AddFunctions(module, module_functions);
}
