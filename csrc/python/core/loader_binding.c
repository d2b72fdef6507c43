/* Python entry points of the batch producers: the type manaka._core.Loader over
 * csrc/data/loader.h. manaka/loader.py wraps it into the public mk.Loader.
 *
 * The object keeps the dataset's NumPy arrays (usually memory-mapped) alive and hands their
 * raw pointers to the C threads, which never touch Python. Batches come back as read-only
 * NumPy views of the C slot buffers whose base is this object, so the buffers outlive every
 * view (a kept view never dangles; its contents are recycled when the next batch is asked
 * for). Waiting for a batch releases the GIL and wakes every 50 ms to check for signals, so
 * Ctrl-C raises KeyboardInterrupt instead of hanging.
 *
 * Each batch is a _core.Batch (of the class next() is given) that also holds the slot's
 * mk_batch, which its producer checked (data/loader.h), for the model and trainer bindings
 * to use as it is instead of converting and scanning the views again (mk_loaded_batch).
 * What makes that safe:
 * - the views are read-only, and NumPy refuses to make them writable (their base, this
 *   object, exports no buffer), so no Python code writes the slot through them;
 * - the slot is used only while it is still the one the consumer holds: `serial`
 *   counts next() and start() calls, after which the slot may be refilled;
 * - the slot is used only while the Batch's fields are its views, unchanged (assigning a
 *   field ends the claim, batch_binding.c; a view reshaped or retyped in place is
 *   converted and checked like any other array);
 * - while a call reads the slot with the GIL released, `pins` makes next() and start()
 *   refuse, so another thread cannot have the slot refilled under the step. */
#include "python/common/binding.h"

#include "data/loader.h"
#include "model_binding.h"
#include "python/common/row_source_capsule.h"

typedef struct {
    PyObject_HEAD
    mk_loader *loader;
    PyObject *arrays[6]; /* tokens, offsets, moves, target, value, policy (or NULL); or
                            the row source's capsule */
    int busy;            /* a call with the GIL released is in progress */
    int64_t tokens_per_side;
    uint64_t serial;     /* next() and start() calls: a Batch of an older one is stale */
    int pins;            /* calls reading the held batch's slot now (mk_loaded_batch) */
} LoaderObject;

enum { FIELDS = MK_BATCH_FIELDS };

static const char OP[] = "Loader";

/* The row source `obj` offers (python/common/row_source_capsule.h): its capsule's, with
 * *capsule a new reference to it; NULL for an object that offers none (an array), or NULL
 * with an exception when its capsule is not one. */
static const mk_row_source *row_source_arg(PyObject *obj, PyObject **capsule) {
    *capsule = NULL;
    if (PyArray_Check(obj)) return NULL;
    PyObject *c = PyObject_GetAttrString(obj, MK_ROW_SOURCE_ATTRIBUTE);
    if (!c) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
        return NULL;
    }
    const mk_row_source *source = PyCapsule_IsValid(c, MK_ROW_SOURCE_CAPSULE)
                                      ? PyCapsule_GetPointer(c, MK_ROW_SOURCE_CAPSULE)
                                      : NULL;
    if (!source) {
        PyErr_Format(PyExc_TypeError, "%s: %s.%s must be a %s capsule, got %s", OP,
                     Py_TYPE(obj)->tp_name, MK_ROW_SOURCE_ATTRIBUTE, MK_ROW_SOURCE_CAPSULE,
                     Py_TYPE(c)->tp_name);
        Py_DECREF(c);
        return NULL;
    }
    *capsule = c;
    return source;
}

/* Creates the C loader and keeps the first `keep` argument objects alive. */
static int finish_init(LoaderObject *self, const mk_dataset_view *data,
                       const mk_loader_config *config, PyObject **obj, int keep) {
    mk_loader *loader = NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS; /* create scans every offset: millions of positions */
    status = mk_loader_create(data, config, &loader);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        mk_raise_status(status);
        return -1;
    }
    self->loader = loader;
    self->tokens_per_side = data->tokens_per_side;
    for (int i = 0; i < 6; i++) {
        self->arrays[i] = i < keep ? obj[i] : NULL;
        Py_XINCREF(self->arrays[i]);
    }
    return 0;
}

static int Loader_init(LoaderObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tokens", "legal_offsets", "legal_moves", "target", "value",
                             "policy_target", "batch_size", "producers", "prefetch",
                             "shuffle", "seed", "drop_last", "nice", "num_tokens", "num_moves",
                             "rank", "world_size", NULL};
    PyObject *obj[6];
    long long batch_size, seed, num_tokens = 0, num_moves = 0, rank = 0, world_size = 1;
    int producers, prefetch, shuffle, drop_last, nice = 0;
    if (self->loader) {
        PyErr_SetString(PyExc_RuntimeError, "Loader: already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOLiipLp|iLLLL", kwlist, &obj[0], &obj[1],
                                     &obj[2], &obj[3], &obj[4], &obj[5], &batch_size,
                                     &producers, &prefetch, &shuffle, &seed, &drop_last, &nice,
                                     &num_tokens, &num_moves, &rank, &world_size))
        return -1;
    if (seed < 0) {
        PyErr_Format(PyExc_ValueError, "%s: seed must be >= 0, got %lld", OP, seed);
        return -1;
    }
    if (world_size < 1) { /* before C, where 0 means unsharded */
        PyErr_Format(PyExc_ValueError, "%s: world_size must be >= 1, got %lld", OP, world_size);
        return -1;
    }
    mk_loader_config config = {
        .batch_size = batch_size, .producers = producers, .prefetch = prefetch,
        .shuffle = shuffle, .seed = (uint64_t)seed, .drop_last = drop_last,
        .nice = nice < 0 ? 0 : nice > 19 ? 19 : nice,
        .rank = rank, .world_size = world_size,
    };
    PyObject *capsule = NULL;
    const mk_row_source *source = row_source_arg(obj[0], &capsule);
    if (source) { /* rows made by the producers: no arrays */
        mk_dataset_view data = {.num_positions = source->num_rows,
                                .tokens_per_side = source->tokens_per_side,
                                .source = source};
        int status = finish_init(self, &data, &config, &capsule, 1);
        Py_DECREF(capsule);
        return status;
    }
    if (PyErr_Occurred()) return -1;
    /* the dataset's vocabularies, which Dataset validated it against: each packed batch is
     * checked against them again (the files may change), 0 = never vouch */
    mk_dataset_view data;
    if (mk_dataset_arg(OP, obj, num_tokens > 0 ? num_tokens : 0, num_moves > 0 ? num_moves : 0,
                       &data) < 0)
        return -1;
    return finish_init(self, &data, &config, obj, obj[5] != Py_None ? 6 : 5);
}

static void Loader_dealloc(LoaderObject *self) {
    if (self->loader) {
        Py_BEGIN_ALLOW_THREADS;
        mk_loader_destroy(self->loader);
        Py_END_ALLOW_THREADS;
    }
    for (int i = 0; i < 6; i++) Py_XDECREF(self->arrays[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Refuses a call on an uninitialised object, while another thread is inside one, or while
 * a step reads the held batch (a next() or start() would let the producers refill its
 * slot); else the held batch's handles go stale. */
static int enter(LoaderObject *self) {
    MK_REQUIRE(self->loader, "Loader", -1);
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Loader: already in use by another thread (one consumer at a time)");
        return -1;
    }
    if (self->pins) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Loader: a step in another thread is reading the current batch (one "
                        "consumer at a time)");
        return -1;
    }
    self->busy = 1;
    self->serial++;
    return 0;
}

static PyObject *Loader_start(LoaderObject *self, PyObject *args) {
    long long epoch, first_batch;
    if (!PyArg_ParseTuple(args, "LL", &epoch, &first_batch)) return NULL;
    if (enter(self) < 0) return NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_loader_start(self->loader, epoch, first_batch);
    Py_END_ALLOW_THREADS;
    self->busy = 0;
    if (status != MK_OK) return mk_raise_status(status);
    Py_RETURN_NONE;
}

/* stop() deliberately skips the busy guard: it is how another thread (a watchdog, close())
 * ends an iteration whose consumer is waiting in next() or whose generator's `finally` is
 * stopping it at the same moment. mk_loader_stop serialises its callers (each producer is
 * joined once); the waiting next() then fails with "no producer is running". */
static PyObject *Loader_stop(LoaderObject *self, PyObject *unused) {
    if (!self->loader) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS;
    mk_loader_stop(self->loader);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

/* A read-only NumPy view of C memory owned by this object. */
static PyObject *view(LoaderObject *self, int ndim, npy_intp *dims, int type, const void *data) {
    PyObject *arr = mk_array_view(ndim, dims, type, (void *)data, (PyObject *)self);
    if (arr) PyArray_CLEARFLAGS((PyArrayObject *)arr, NPY_ARRAY_WRITEABLE);
    return arr;
}

/* Whether `arr` is still the view of field `field` of the slot `b` it was made as: data,
 * type and shape (NumPy lets a user set .shape, .strides or .dtype of a view in place). */
static int unchanged(PyObject *arr, const mk_batch *b, int field) {
    static const int types[FIELDS] = {NPY_INT32, NPY_INT32, NPY_INT32, NPY_INT32, NPY_FLOAT32,
                                      NPY_FLOAT32};
    const void *data[FIELDS] = {b->tokens, b->legal, b->counts, b->target, b->value,
                                b->policy_target};
    if (!arr || !data[field]) return !arr && !data[field];
    PyArrayObject *a = (PyArrayObject *)arr;
    npy_intp dims[3] = {b->B, field == 0 ? b->S : b->L, b->T};
    int ndim = field == 0 ? 3 : field == 1 || field == 5 ? 2 : 1;
    if (!PyArray_Check(arr) || PyArray_DATA(a) != data[field] ||
        PyArray_TYPE(a) != types[field] || PyArray_NDIM(a) != ndim || PyArray_ISWRITEABLE(a) ||
        !PyArray_IS_C_CONTIGUOUS(a))
        return 0;
    for (int d = 0; d < ndim; d++)
        if (PyArray_DIM(a, d) != dims[d]) return 0;
    return 1;
}

int mk_loaded_batch_current(mk_batch_object *b) {
    LoaderObject *loader = (LoaderObject *)b->loader;
    return b->serial == loader->serial && !loader->busy;
}

int mk_loaded_batch(mk_batch_object *b, mk_batch *out, PyObject **pin) {
    *pin = NULL;
    if (!mk_loaded_batch_current(b)) return 0; /* its slot was recycled */
    for (int i = 0; i < FIELDS; i++)
        if (!unchanged(b->field[i], &b->batch, i)) return 0;
    *out = b->batch;
    ((LoaderObject *)b->loader)->pins++;
    *pin = Py_NewRef(b->loader);
    return 1;
}

void mk_loaded_batch_unpin(PyObject *pin) {
    if (!pin) return;
    ((LoaderObject *)pin)->pins--;
    Py_DECREF(pin);
}

/* next(batch_class) -> (epoch, index, batch, positions), or None when the epoch is
 * exhausted: batch, an instance of batch_class (a subclass of _core.Batch) whose fields
 * are read-only views of the slot and which holds the slot's mk_batch. */
static PyObject *Loader_next(LoaderObject *self, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &mk_batch_type)) {
        PyErr_Format(PyExc_TypeError, "Loader.next: batch_class must be a subclass of "
                     "manaka._core.Batch, got %R", cls);
        return NULL;
    }
    if (enter(self) < 0) return NULL;
    const mk_loader_batch *lb = NULL;
    int end = 0;
    mk_status status;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS;
        status = mk_loader_next(self->loader, 0.05, &lb, &end);
        Py_END_ALLOW_THREADS;
        if (status != MK_OK || lb || end) break;
        if (PyErr_CheckSignals() < 0) { /* KeyboardInterrupt: the caller stops the loader */
            self->busy = 0;
            return NULL;
        }
    }
    self->busy = 0;
    if (status != MK_OK) return mk_raise_status(status);
    if (end) Py_RETURN_NONE;
    const mk_batch *b = &lb->batch;
    npy_intp B = b->B, L = b->L;
    npy_intp tok_dims[3] = {B, 2, self->tokens_per_side}, mat[2] = {B, L}, row[1] = {B};
    mk_batch_object *h = (mk_batch_object *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
    if (!h) return NULL;
    h->loader = Py_NewRef((PyObject *)self);
    h->serial = self->serial;
    h->batch = *b;
    PyObject **v = h->field;
    v[0] = view(self, 3, tok_dims, NPY_INT32, b->tokens);
    v[1] = view(self, 2, mat, NPY_INT32, b->legal);
    v[2] = view(self, 1, row, NPY_INT32, b->counts);
    v[3] = view(self, 1, row, NPY_INT32, b->target);
    v[4] = view(self, 1, row, NPY_FLOAT32, b->value);
    v[5] = b->policy_target ? view(self, 2, mat, NPY_FLOAT32, b->policy_target) : NULL;
    PyObject *positions = view(self, 1, row, NPY_INT64, lb->positions);
    int made = positions != NULL;
    for (int i = 0; i < FIELDS; i++) made &= v[i] != NULL || (i == 5 && !b->policy_target);
    if (!made) {
        Py_XDECREF(positions);
        Py_DECREF(h);
        return NULL;
    }
    return Py_BuildValue("LLNN", (long long)lb->epoch, (long long)lb->index, (PyObject *)h,
                         positions);
}

static PyObject *Loader_stats(LoaderObject *self, PyObject *unused) {
    MK_REQUIRE(self->loader, "Loader", NULL);
    mk_loader_stats st;
    mk_loader_get_stats(self->loader, &st);
    return Py_BuildValue("{s:L,s:L,s:d,s:i,s:i,s:i,s:L}", "batches", (long long)st.batches,
                         "positions", (long long)st.positions, "wait_seconds", st.wait_seconds,
                         "queue_depth", st.queue_depth, "queue_capacity", st.queue_capacity,
                         "running_threads", st.running_threads, "skipped", (long long)st.skipped);
}

static PyObject *Loader_num_batches(LoaderObject *self, void *closure) {
    if (!self->loader) return PyLong_FromLong(0);
    return PyLong_FromLongLong(mk_loader_num_batches(self->loader));
}

static PyMethodDef Loader_methods[] = {
    {"start", (PyCFunction)Loader_start, METH_VARARGS,
     "start(epoch, first_batch): (re)start the producers at that batch of that epoch."},
    {"next", (PyCFunction)Loader_next, METH_O,
     "next(batch_class) -> (epoch, index, batch, positions) or None at the end of the epoch. "
     "Recycles the previous batch's buffers."},
    {"stop", (PyCFunction)Loader_stop, METH_NOARGS, "stop(): stop and join the producers."},
    {"stats", (PyCFunction)Loader_stats, METH_NOARGS, "stats() -> dict"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Loader_getset[] = {
    {"num_batches", (getter)Loader_num_batches, NULL, "batches per epoch", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._core.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "C batch producers over a dataset's arrays (use manaka.Loader).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Loader_init,
    .tp_dealloc = (destructor)Loader_dealloc,
    .tp_methods = Loader_methods,
    .tp_getset = Loader_getset,
};

int mk_init_loader(PyObject *module) {
    if (PyType_Ready(&LoaderType) < 0) return -1;
    return PyModule_AddObjectRef(module, "Loader", (PyObject *)&LoaderType);
}
