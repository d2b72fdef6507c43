/* Python entry points of the batch producers: the type manaka._core.Loader over
 * csrc/loader.h. manaka/loader.py wraps it into the public mk.Loader.
 *
 * The object keeps the dataset's NumPy arrays (usually memory-mapped) alive and hands their
 * raw pointers to the C threads, which never touch Python. Batches come back as NumPy views
 * of the C slot buffers whose base is this object, so the buffers outlive every view (a
 * kept view never dangles; its contents are recycled when the next batch is asked for).
 * Waiting for a batch releases the GIL and wakes every 50 ms to check for signals, so
 * Ctrl-C raises KeyboardInterrupt instead of hanging. */
#include "python/common/binding.h"

#include "data/loader.h"

/* shogi_binding.c: the row source of a _core.ShogiRecords, NULL for any other object. */
const mk_row_source *mk_shogi_row_source(PyObject *obj);

typedef struct {
    PyObject_HEAD
    mk_loader *loader;
    PyObject *arrays[6]; /* tokens, offsets, moves, target, value, policy (or NULL) */
    int busy;            /* a call with the GIL released is in progress */
    int64_t tokens_per_side;
} LoaderObject;

static const char OP[] = "Loader";

/* A borrowed, validated array: exact dtype, ndim, C-contiguous and aligned (it is read
 * in place by other threads: no copy of a memory-mapped file is ever made here). */
static PyArrayObject *dataset_array(PyObject *obj, const char *name, int type1, int type2,
                                    int ndim) {
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a NumPy array, got %s", OP, name,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != type1 && PyArray_TYPE(a) != type2) {
        PyObject *dtype = PyObject_Str((PyObject *)PyArray_DESCR(a));
        PyErr_Format(PyExc_TypeError, "%s: %s has dtype %S, not the dataset format's", OP, name,
                     dtype);
        Py_XDECREF(dtype);
        return NULL;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %d dimension(s), got %d", OP, name, ndim,
                     PyArray_NDIM(a));
        return NULL;
    }
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be C-contiguous and aligned", OP, name);
        return NULL;
    }
    return a;
}

static int check_len(PyArrayObject *a, const char *name, int64_t want, const char *why) {
    if ((int64_t)PyArray_DIM(a, 0) == want) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s has %lld entries, expected %lld (%s)", OP, name,
                 (long long)PyArray_DIM(a, 0), (long long)want, why);
    return -1;
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
                             "shuffle", "seed", "drop_last", "nice", NULL};
    PyObject *obj[6];
    long long batch_size, seed;
    int producers, prefetch, shuffle, drop_last, nice = 0;
    if (self->loader) {
        PyErr_SetString(PyExc_RuntimeError, "Loader: already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOLiipLp|i", kwlist, &obj[0], &obj[1],
                                     &obj[2], &obj[3], &obj[4], &obj[5], &batch_size,
                                     &producers, &prefetch, &shuffle, &seed, &drop_last, &nice))
        return -1;
    if (seed < 0) {
        PyErr_Format(PyExc_ValueError, "%s: seed must be >= 0, got %lld", OP, seed);
        return -1;
    }
    mk_loader_config config = {
        .batch_size = batch_size, .producers = producers, .prefetch = prefetch,
        .shuffle = shuffle, .seed = (uint64_t)seed, .drop_last = drop_last,
        .nice = nice < 0 ? 0 : nice > 19 ? 19 : nice,
    };
    const mk_row_source *source = mk_shogi_row_source(obj[0]);
    if (source) { /* rows made by the producers: no arrays */
        mk_dataset_view data = {.num_positions = source->num_rows,
                                .tokens_per_side = source->tokens_per_side,
                                .source = source};
        return finish_init(self, &data, &config, obj, 1);
    }
    PyArrayObject *tokens, *offsets, *moves, *target, *value, *policy = NULL;
    if (!(tokens = dataset_array(obj[0], "tokens", NPY_INT16, NPY_INT16, 3))) return -1;
    if (!(offsets = dataset_array(obj[1], "legal_offsets", NPY_INT64, NPY_INT64, 1))) return -1;
    if (!(moves = dataset_array(obj[2], "legal_moves", NPY_INT16, NPY_INT32, 1))) return -1;
    if (!(target = dataset_array(obj[3], "target", NPY_INT32, NPY_INT32, 1))) return -1;
    if (!(value = dataset_array(obj[4], "value", NPY_FLOAT32, NPY_FLOAT32, 1))) return -1;
    if (obj[5] != Py_None &&
        !(policy = dataset_array(obj[5], "policy_target", NPY_FLOAT32, NPY_FLOAT32, 1)))
        return -1;
    int64_t N = PyArray_DIM(tokens, 0);
    if (PyArray_DIM(tokens, 1) != 2) {
        PyErr_Format(PyExc_ValueError, "%s: tokens must be [N, 2, T], got shape[1] = %lld", OP,
                     (long long)PyArray_DIM(tokens, 1));
        return -1;
    }
    if (check_len(offsets, "legal_offsets", N + 1, "N + 1") ||
        check_len(target, "target", N, "N = tokens.shape[0]") ||
        check_len(value, "value", N, "N = tokens.shape[0]") ||
        (policy && check_len(policy, "policy_target", PyArray_DIM(moves, 0), "len(legal_moves)")))
        return -1;
    mk_dataset_view data = {
        .num_positions = N,
        .tokens_per_side = PyArray_DIM(tokens, 2),
        .tokens = PyArray_DATA(tokens),
        .legal_offsets = PyArray_DATA(offsets),
        .legal_moves = PyArray_DATA(moves),
        .total_moves = PyArray_DIM(moves, 0),
        .moves_itemsize = (int)PyArray_ITEMSIZE(moves),
        .target = PyArray_DATA(target),
        .value = PyArray_DATA(value),
        .policy_target = policy ? PyArray_DATA(policy) : NULL,
    };
    return finish_init(self, &data, &config, obj, policy ? 6 : 5);
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

/* Refuses a call on an uninitialised object or while another thread is inside one. */
static int enter(LoaderObject *self) {
    if (!self->loader) {
        PyErr_SetString(PyExc_RuntimeError, "Loader: not initialised");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Loader: already in use by another thread (one consumer at a time)");
        return -1;
    }
    self->busy = 1;
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

/* A NumPy view of C memory owned by this object. */
static PyObject *view(LoaderObject *self, int ndim, npy_intp *dims, int type, void *data) {
    return mk_array_view(ndim, dims, type, data, (PyObject *)self);
}

/* next() -> (epoch, index, tokens, legal, counts, target, value, policy_target|None,
 * positions), or None when the epoch is exhausted. */
static PyObject *Loader_next(LoaderObject *self, PyObject *unused) {
    if (enter(self) < 0) return NULL;
    const mk_batch *b = NULL;
    int end = 0;
    mk_status status;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS;
        status = mk_loader_next(self->loader, 0.05, &b, &end);
        Py_END_ALLOW_THREADS;
        if (status != MK_OK || b || end) break;
        if (PyErr_CheckSignals() < 0) { /* KeyboardInterrupt: the caller stops the loader */
            self->busy = 0;
            return NULL;
        }
    }
    self->busy = 0;
    if (status != MK_OK) return mk_raise_status(status);
    if (end) Py_RETURN_NONE;
    npy_intp B = b->size, L = b->max_legal;
    npy_intp tok_dims[3] = {B, 2, self->tokens_per_side}, mat[2] = {B, L}, row[1] = {B};
    PyObject *items[7] = {
        view(self, 3, tok_dims, NPY_INT32, b->tokens),
        view(self, 2, mat, NPY_INT32, b->legal),
        view(self, 1, row, NPY_INT32, b->counts),
        view(self, 1, row, NPY_INT32, b->target),
        view(self, 1, row, NPY_FLOAT32, b->value),
        b->policy_target ? view(self, 2, mat, NPY_FLOAT32, b->policy_target)
                         : (Py_INCREF(Py_None), Py_None),
        view(self, 1, row, NPY_INT64, b->positions),
    };
    for (int i = 0; i < 7; i++) {
        if (!items[i]) {
            for (int j = 0; j < 7; j++) Py_XDECREF(items[j]);
            return NULL;
        }
    }
    return Py_BuildValue("LLNNNNNNN", (long long)b->epoch, (long long)b->index, items[0],
                         items[1], items[2], items[3], items[4], items[5], items[6]);
}

static PyObject *Loader_stats(LoaderObject *self, PyObject *unused) {
    if (!self->loader) {
        PyErr_SetString(PyExc_RuntimeError, "Loader: not initialised");
        return NULL;
    }
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
    {"next", (PyCFunction)Loader_next, METH_NOARGS,
     "next() -> (epoch, index, tokens, legal, counts, target, value, policy_target, positions) "
     "or None at the end of the epoch. Recycles the previous batch's buffers."},
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
