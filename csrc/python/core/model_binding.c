/* _core.Model: the C network behind manaka.Model (manaka/model.py holds the user-facing
 * class, its docstrings and the file format). Every entry point converts and checks its
 * arguments, then releases the GIL around the C call. */
#include "model_binding.h"

int mk_model_acquire(mk_model_object *self, const char *op) {
    if (!self->model) {
        PyErr_Format(PyExc_RuntimeError, "%s: the model is not initialised", op);
        return -1;
    }
    if (self->busy) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s: the model is in use by another thread (a Model runs one call at a time)",
                     op);
        return -1;
    }
    self->busy = 1;
    return 0;
}
void mk_model_release(mk_model_object *self) { self->busy = 0; }

/* ModelConfig's fields, in the order of its constructor and of _core.Model's. */
static char *config_fields[] = {"num_tokens", "num_moves", "tokens_per_side", "embed_dim",
                                "orders",     "pair_dim",  "hidden",          "head_width",
                                "move_pairs", "board_width", "board_height", "board_kinds",
                                "move_hidden", "move_shared", "move_hidden_gate", "move_kinds", "value_hidden",
                                "value_power_sums", NULL};
#define CONFIG_FIELDS 18
#define FIRST_COUNT_FIELD 8 /* move_pairs, the board, move_hidden, move_shared, move_hidden_gate,
                               move_kinds, value_hidden, value_power_sums: counts that may be 0
                               (mk_config_check_count) */

/* One width of a model config as a Python int (new reference), *out holding it, or NULL.
 * The binding converts its type only (mk_config_int_arg); the rules are C's (model.h).
 * It words only what C cannot hold, a value outside int64: below, the rule of every
 * width; above, when `build`ing a model, the limit every width is far below (ModelConfig
 * accepts it: *out is then INT64_MAX). Unless `build`ing (mk_model_create then checks
 * all), it runs mk_config_check_dim. */
static PyObject *config_int(PyObject *obj, const char *name, int build, int count, int64_t *out) {
    PyObject *value = mk_config_int_arg(obj, "ModelConfig", name);
    if (!value) return NULL;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) goto fail;
    *out = overflow > 0 ? INT64_MAX : v;
    if (overflow < 0) {
        PyErr_Format(PyExc_ValueError, "ModelConfig: %s must be >= %d, got %S", name, !count, value);
    } else if (overflow > 0 && build) {
        PyErr_Format(PyExc_ValueError, "ModelConfig: %s = %S is above 2^31 - 1", name, value);
    } else {
        mk_status st = build ? MK_OK
                       : count ? mk_config_check_count(name, *out)
                               : mk_config_check_dim(name, *out);
        if (st == MK_OK) return value;
        mk_raise_status(st);
    }
fail:
    Py_DECREF(value);
    return NULL;
}

/* ModelConfig's eighteen fields `o` (config_fields' order) converted by config_int into `cfg`
 * (the first MK_MAX_HIDDEN hidden widths; num_hidden counts them all, for mk_config_check
 * to refuse too many) and into the returned tuple of Python ints (hidden a tuple). */
static PyObject *config_from_args(PyObject *const o[CONFIG_FIELDS], int build, mk_config *cfg) {
    int64_t *fields[] = {&cfg->num_tokens, &cfg->num_moves, &cfg->tokens_per_side,
                         &cfg->embed_dim,  &cfg->orders,    &cfg->pair_dim,
                         NULL,             &cfg->head_width, &cfg->move_pairs,
                         &cfg->board_width, &cfg->board_height, &cfg->board_kinds,
                         &cfg->move_hidden, &cfg->move_shared, &cfg->move_hidden_gate,
                         &cfg->move_kinds, &cfg->value_hidden, &cfg->value_power_sums};
    PyObject *out = PyTuple_New(CONFIG_FIELDS), *hidden = NULL, *widths, *v;
    int64_t width;
    char name[32];
    for (int i = 0; out && i < CONFIG_FIELDS; i++) {
        if (i == 6) continue; /* hidden, after the widths */
        if (!(v = config_int(o[i], config_fields[i], build, i >= FIRST_COUNT_FIELD, fields[i])))
            goto fail;
        PyTuple_SET_ITEM(out, i, v);
    }
    if (!out || !(hidden = PySequence_Fast(o[6], ""))) {
        if (out && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "ModelConfig: hidden must be a sequence of ints, got %R",
                         o[6]);
        }
        goto fail;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(hidden);
    cfg->num_hidden = n > INT_MAX ? INT_MAX : (int)n;
    if (!(widths = PyTuple_New(n))) goto fail;
    PyTuple_SET_ITEM(out, 6, widths);
    for (Py_ssize_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "hidden[%zd]", i);
        if (!(v = config_int(PySequence_Fast_GET_ITEM(hidden, i), name, build, 0, &width)))
            goto fail;
        PyTuple_SET_ITEM(widths, i, v);
        if (i < MK_MAX_HIDDEN) cfg->hidden[i] = width;
    }
    Py_DECREF(hidden);
    return out;
fail:
    Py_XDECREF(hidden);
    Py_XDECREF(out); /* a tuple not yet full is freed like any other */
    return NULL;
}

/* check_model_config(num_tokens, ..., hidden, head_width, move_pairs, board_width,
 * board_height, board_kinds, move_hidden, move_shared, move_hidden_gate, move_kinds, value_hidden,
 * value_power_sums) ->
 * the fields as Python ints:
 * ModelConfig's check when it is made (types, and mk_config_check_dim). The sizes this
 * build supports are checked when a model is made (mk_config_check). */
static PyObject *py_check_model_config(PyObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *o[CONFIG_FIELDS];
    mk_config cfg = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOOOOOOOO:check_model_config",
                                     config_fields, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                                     &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13],
                                     &o[14], &o[15], &o[16], &o[17]))
        return NULL;
    return config_from_args(o, 0, &cfg);
}

/* The op table `arg` names: NULL or a str looks up this module's registry ("cpu",
 * "cpu_staged"); a PyCapsule named MK_BACKEND_CAPSULE carries a table exported by another
 * extension (manaka._cuda). The table lives in that extension's static data, and CPython
 * never unloads an extension module, so the pointer stays valid for the model's life. */
mk_engine_layout mk_engine_layout_of_core(void) {
    return (mk_engine_layout){sizeof(mk_backend), sizeof(mk_batch)};
}

const mk_backend *mk_backend_from_arg(PyObject *arg) {
    const mk_backend *backend;
    if (!arg || PyUnicode_Check(arg)) {
        const char *name = arg ? PyUnicode_AsUTF8(arg) : "cpu";
        if (!name) return NULL;
        backend = mk_backend_get(name);
        if (!backend) mk_raise_status(MK_ERR_VALUE);
        return backend;
    }
    if (!PyCapsule_IsValid(arg, MK_BACKEND_CAPSULE)) {
        PyErr_Format(PyExc_TypeError,
                     "_core.Model: backend must be a name or a '%s' capsule, got %s",
                     MK_BACKEND_CAPSULE, Py_TYPE(arg)->tp_name);
        return NULL;
    }
    backend = PyCapsule_GetPointer(arg, MK_BACKEND_CAPSULE);
    mk_status status = mk_backend_check(backend);
    if (status != MK_OK) return mk_raise_status(status), NULL;
    return backend;
}

/* The model's seed (default 0): converted as a config int, then an int in [0, 2^64), the
 * range of the core's uint64_t (a ValueError naming it outside: "K" would wrap -1). */
static int seed_arg(PyObject *obj, uint64_t *seed) {
    *seed = 0;
    PyObject *v = obj ? mk_config_int_arg(obj, "Model", "seed") : NULL;
    if (!v) return obj ? -1 : 0;
    unsigned long long s = PyLong_AsUnsignedLongLong(v);
    if (s == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "Model: seed must be an int in [0, 2**64), got %S", v);
    }
    *seed = s;
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int model_init(mk_model_object *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"num_tokens", "num_moves",  "tokens_per_side", "embed_dim", "orders",
                         "pair_dim",   "hidden",     "head_width",      "move_pairs", "board_width",
                         "board_height", "board_kinds", "move_hidden", "move_shared", "move_hidden_gate",
                         "move_kinds", "value_hidden", "value_power_sums", "backend", "seed",
                         "fused_head", NULL}; /* config_fields, then the model's own */
    PyObject *o[CONFIG_FIELDS];
    PyObject *backend_arg = NULL; /* a name ("cpu") or a capsule of another module's table */
    PyObject *seed_obj = NULL;
    uint64_t seed;
    int fused_head = 1; /* the training step's policy head: see mk_model_set_fused_policy_head */
    if (self->model) {
        PyErr_SetString(PyExc_RuntimeError, "_core.Model: already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOOOOOOOO|OOp", kw, &o[0], &o[1], &o[2],
                                     &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10],
                                     &o[11], &o[12], &o[13], &o[14], &o[15], &o[16], &o[17], &backend_arg,
                                     &seed_obj,
                                     &fused_head))
        return -1;
    mk_config cfg = {0};
    PyObject *values = config_from_args(o, 1, &cfg);
    if (!values) return -1;
    if (seed_arg(seed_obj, &seed) < 0) return Py_DECREF(values), -1;
    Py_DECREF(values);
    const mk_backend *backend = mk_backend_from_arg(backend_arg);
    if (!backend) return -1;
    mk_model *model = NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_model_create(&cfg, backend, NULL, seed, &model);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) return mk_raise_status(status), -1;
    mk_model_set_fused_policy_head(model, fused_head);
    self->model = model;
    return 0;
}

static void model_dealloc(mk_model_object *self) {
    mk_model_destroy(self->model); /* first: waits for every step that reads a kept batch */
    for (int k = 0; k < MK_STAGING_SLOTS; k++) Py_CLEAR(self->keep[k]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *shape_tuple(const mk_tensor *t) {
    return t->ndim == 2 ? Py_BuildValue("(LL)", (long long)t->shape[0], (long long)t->shape[1])
                        : Py_BuildValue("(L)", (long long)t->shape[0]);
}

/* [(name, shape, decay)] in parameter order. */
static PyObject *model_tensors(mk_model_object *self, PyObject *unused) {
    MK_REQUIRE(self->model, "Model", NULL);
    int n = mk_model_num_tensors(self->model);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        const mk_tensor *t = mk_model_tensor(self->model, i);
        PyObject *shape = shape_tuple(t);
        PyObject *item = shape ? Py_BuildValue("(sNO)", t->name, shape, t->decay ? Py_True : Py_False) : NULL;
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* [(name, kind, decay, offset, size, [tensor names])]: the parameter groups the trainer
 * updates (mk_model_param_groups), in placement order, offsets and sizes in floats. */
static PyObject *model_param_groups(mk_model_object *self, PyObject *unused) {
    MK_REQUIRE(self->model, "Model", NULL);
    mk_param_group groups[MK_MAX_PARAM_GROUPS];
    int n = mk_model_param_groups(self->model, groups, MK_MAX_PARAM_GROUPS);
    PyObject *list = PyList_New(n);
    for (int g = 0; list && g < n; g++) {
        PyObject *names = PyList_New(0);
        for (int i = 0; names && i < mk_model_num_tensors(self->model); i++) {
            const mk_tensor *t = mk_model_tensor(self->model, i);
            PyObject *name = t->group == g ? PyUnicode_FromString(t->name) : NULL;
            if (t->group == g && (!name || PyList_Append(names, name) < 0)) Py_CLEAR(names);
            Py_XDECREF(name);
        }
        const mk_param_group *pg = &groups[g];
        PyObject *item = names ? Py_BuildValue("(ssOLLN)", pg->name,
                                               pg->kind == MK_GROUP_PAIR_TABLE ? "pair_table" : "dense",
                                               pg->decay ? Py_True : Py_False, (long long)pg->offset,
                                               (long long)pg->size, names)
                               : NULL;
        if (!item) Py_CLEAR(list);
        else PyList_SET_ITEM(list, g, item);
    }
    return list;
}

const mk_tensor *mk_tensor_named(mk_model *model, const char *name, const char *op,
                                 int *index) {
    int i = mk_model_find(model, name);
    if (i < 0) {
        PyErr_Format(PyExc_KeyError, "%s: the model has no tensor named '%s'", op, name);
        return NULL;
    }
    if (index) *index = i;
    return mk_model_tensor(model, i);
}

static const mk_tensor *find(mk_model *model, PyObject *name_o, const char *op, int *index) {
    const char *name = PyUnicode_Check(name_o) ? PyUnicode_AsUTF8(name_o) : NULL;
    if (!name) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s: name must be a str", op);
        return NULL;
    }
    return mk_tensor_named(model, name, op, index);
}

static void shape_of(const mk_tensor *t, npy_intp *dims) {
    dims[0] = (npy_intp)t->shape[0];
    dims[1] = (npy_intp)t->shape[1];
}

PyObject *mk_tensor_empty(const mk_tensor *t) {
    npy_intp dims[2];
    shape_of(t, dims);
    return PyArray_SimpleNew(t->ndim, dims, NPY_FLOAT32);
}

/* address(name) -> (pointer, shape): where the live parameter sits in the backend's memory
 * (a device pointer on a GPU backend), for zero-copy views such as manaka.DeviceArray. */
static PyObject *model_address(mk_model_object *self, PyObject *name) {
    MK_REQUIRE(self->model, "Model", NULL);
    const mk_tensor *t = find(self->model, name, "Model.parameters", NULL);
    if (!t) return NULL;
    PyObject *shape = shape_tuple(t);
    if (!shape) return NULL;
    return Py_BuildValue("(NN)", PyLong_FromVoidPtr(mk_model_params(self->model) + t->offset),
                         shape);
}

/* view(name): the live parameter as a NumPy view (backends with host memory only). */
static PyObject *model_view(mk_model_object *self, PyObject *name) {
    MK_REQUIRE(self->model, "Model", NULL);
    const mk_tensor *t = find(self->model, name, "Model.parameters", NULL);
    if (!t) return NULL;
    if (!mk_model_backend(self->model)->host_memory) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Model.parameters: this backend's parameters are not in host memory");
        return NULL;
    }
    npy_intp dims[2];
    shape_of(t, dims);
    return mk_array_view(t->ndim, dims, NPY_FLOAT32, mk_model_params(self->model) + t->offset,
                         (PyObject *)self);
}

PyObject *mk_tensor_copy(mk_model_object *self, const char *op, int index, PyObject *value,
                         mk_trainer *moments, int kind) {
    const mk_tensor *t = mk_model_tensor(self->model, index);
    PyArrayObject *arr = value ? mk_tensor_arg(t, value, op) : (PyArrayObject *)mk_tensor_empty(t);
    if (!arr) return NULL;
    if (mk_model_acquire(self, op) < 0) return Py_DECREF(arr), NULL;
    const mk_backend *be = mk_model_backend(self->model);
    void *stream = mk_model_stream(self->model);
    float *host = PyArray_DATA(arr);
    float *dev = (kind ? mk_model_grads(self->model) : mk_model_params(self->model)) + t->offset;
    const size_t bytes = (size_t)t->numel * sizeof(float);
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    if (moments)
        status = value ? mk_trainer_write_moment(moments, kind, index, host)
                       : mk_trainer_read_moment(moments, kind, index, host);
    else
        status = value ? be->to_device(stream, dev, host, bytes) : be->to_host(stream, host, dev, bytes);
    Py_END_ALLOW_THREADS;
    mk_model_release(self);
    if (status != MK_OK) return Py_DECREF(arr), mk_raise_status(status);
    if (!value) return (PyObject *)arr;
    Py_DECREF(arr);
    Py_RETURN_NONE;
}

/* read(name, grad=False): a copy of the parameter (or of its last gradient). */
static PyObject *model_read(mk_model_object *self, PyObject *args) {
    MK_REQUIRE(self->model, "Model", NULL);
    PyObject *name;
    int grad = 0, index;
    if (!PyArg_ParseTuple(args, "O|p", &name, &grad)) return NULL;
    if (!find(self->model, name, "Model.state_dict", &index)) return NULL;
    return mk_tensor_copy(self, "Model.state_dict", index, NULL, NULL, grad);
}

/* Checks `value` is a float32 array of t's exact shape; new reference or NULL. */
PyArrayObject *mk_tensor_arg(const mk_tensor *t, PyObject *value, const char *op) {
    PyArrayObject *arr = mk_float_arg(value, op, t->name, t->ndim);
    if (!arr) return NULL;
    if (PyArray_DIM(arr, 0) == t->shape[0] && (t->ndim == 1 || PyArray_DIM(arr, 1) == t->shape[1]))
        return arr;
    if (t->ndim == 2)
        PyErr_Format(PyExc_ValueError, "%s: %s has shape (%zd, %zd), expected (%lld, %lld)", op,
                     t->name, (Py_ssize_t)PyArray_DIM(arr, 0), (Py_ssize_t)PyArray_DIM(arr, 1),
                     (long long)t->shape[0], (long long)t->shape[1]);
    else
        PyErr_Format(PyExc_ValueError, "%s: %s has shape (%zd,), expected (%lld,)", op, t->name,
                     (Py_ssize_t)PyArray_DIM(arr, 0), (long long)t->shape[0]);
    Py_DECREF(arr);
    return NULL;
}

/* write(name, array): copies a float32 array of the tensor's shape into the parameter. */
static PyObject *model_write(mk_model_object *self, PyObject *args) {
    MK_REQUIRE(self->model, "Model", NULL);
    PyObject *name, *value;
    int index;
    static const char op[] = "Model.load_state_dict";
    if (!PyArg_ParseTuple(args, "OO", &name, &value)) return NULL;
    if (!find(self->model, name, op, &index)) return NULL;
    return mk_tensor_copy(self, op, index, value, NULL, 0);
}

/* write_all([(name, array), ...]): sets those parameters, all or none: every array is
 * checked, then the model is held once for every copy, so a step another thread starts
 * cannot come between two of them and make a later one fail, leaving a model half set. */
static PyObject *model_write_all(mk_model_object *self, PyObject *pairs) {
    MK_REQUIRE(self->model, "Model", NULL);
    static const char op[] = "Model.load_state_dict";
    if (!PyList_Check(pairs)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a list of (name, array) pairs", op);
        return NULL;
    }
    const Py_ssize_t n = PyList_GET_SIZE(pairs);
    PyArrayObject **arrays = calloc((size_t)(n > 0 ? n : 1), sizeof *arrays);
    int *indices = calloc((size_t)(n > 0 ? n : 1), sizeof *indices);
    PyObject *result = NULL;
    if (!arrays || !indices) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *value;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(pairs, i), "OO", &name, &value)) goto done;
        const mk_tensor *t = find(self->model, name, op, &indices[i]);
        if (!t || !(arrays[i] = mk_tensor_arg(t, value, op))) goto done;
    }
    if (mk_model_acquire(self, op) < 0) goto done;
    const mk_backend *be = mk_model_backend(self->model);
    void *stream = mk_model_stream(self->model);
    float *params = mk_model_params(self->model);
    mk_status status = MK_OK;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n && status == MK_OK; i++) {
        const mk_tensor *t = mk_model_tensor(self->model, indices[i]);
        status = be->to_device(stream, params + t->offset, PyArray_DATA(arrays[i]),
                               (size_t)t->numel * sizeof(float));
    }
    Py_END_ALLOW_THREADS;
    mk_model_release(self);
    if (status != MK_OK) mk_raise_status(status);
    else result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; arrays && i < n; i++) Py_XDECREF(arrays[i]);
    free(arrays);
    free(indices);
    return result;
}

int mk_model_batch_begin(mk_model_object *self, const char *op, PyObject *obj, int with_targets,
                         mk_batch_hold *hold, mk_batch *batch) {
    const char *device = mk_model_backend(self->model)->name;
    if (mk_batch_take(op, obj, with_targets, device, hold, batch) < 0) return -2;
    if (mk_model_acquire(self, op) < 0) return mk_batch_release(hold), -2;
    int slot = mk_model_next_slot(self->model);
    if (slot < 0 || !self->keep[slot]) return slot;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_model_wait_slot(self->model, slot);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        mk_model_release(self);
        mk_batch_release(hold);
        return mk_raise_status(status), -2;
    }
    Py_CLEAR(self->keep[slot]);
    return slot;
}

void mk_model_batch_end(mk_model_object *self, int slot, mk_batch_hold *hold) {
    if (slot >= 0 && hold->owner) Py_XSETREF(self->keep[slot], Py_NewRef(hold->owner));
    mk_model_release(self);
    mk_batch_release(hold);
}

/* forward(batch) -> (logits, value): reads tokens, legal and counts of a _core.Batch. */
static PyObject *model_forward(mk_model_object *self, PyObject *obj) {
    MK_REQUIRE(self->model, "Model", NULL);
    mk_batch_hold hold;
    mk_batch batch;
    int slot = mk_model_batch_begin(self, "Model.forward", obj, 0, &hold, &batch);
    if (slot < -1) return NULL;
    int bad = batch.B < 0 || batch.L < 0; /* the check reports it */
    npy_intp dims[2] = {bad ? 0 : (npy_intp)batch.B, bad ? 0 : (npy_intp)batch.L};
    PyObject *logits = PyArray_SimpleNew(2, dims, NPY_FLOAT32);
    PyObject *value = logits ? PyArray_SimpleNew(1, dims, NPY_FLOAT32) : NULL;
    mk_status status = MK_OK;
    if (value) {
        Py_BEGIN_ALLOW_THREADS;
        status = mk_model_forward(self->model, &batch, PyArray_DATA((PyArrayObject *)logits),
                                  PyArray_DATA((PyArrayObject *)value));
        Py_END_ALLOW_THREADS;
    }
    mk_model_batch_end(self, slot, &hold);
    if (value && status == MK_OK) return Py_BuildValue("NN", logits, value);
    if (value) mk_raise_status(status);
    Py_XDECREF(logits);
    Py_XDECREF(value);
    return NULL;
}

/* loss_and_grad(batch, value_weight) -> stats (float32 [MK_STAT_COUNT]); gradients stay in
 * the model, read with read(name, True). mk_model_loss_and_grad checks value_weight. */
static PyObject *model_loss_and_grad(mk_model_object *self, PyObject *args) {
    MK_REQUIRE(self->model, "Model", NULL);
    PyObject *obj, *stats;
    double value_weight;
    mk_batch_hold hold;
    mk_batch batch;
    npy_intp dims[1] = {MK_STAT_COUNT};
    if (!PyArg_ParseTuple(args, "Od", &obj, &value_weight) ||
        !(stats = PyArray_ZEROS(1, dims, NPY_FLOAT32, 0)))
        return NULL;
    int slot = mk_model_batch_begin(self, "Model.loss_and_grad", obj, 1, &hold, &batch);
    if (slot < -1) return Py_DECREF(stats), NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_model_loss_and_grad(self->model, &batch, (float)value_weight,
                                    PyArray_DATA((PyArrayObject *)stats));
    Py_END_ALLOW_THREADS;
    mk_model_batch_end(self, slot, &hold);
    if (status == MK_OK) return stats;
    Py_DECREF(stats);
    return mk_raise_status(status);
}

enum { GET_BACKEND, GET_FUSED_HEAD, GET_STREAM, GET_COPY_STREAM, GET_BATCH_SCANS, GET_ARENA };

/* The read-only properties (model_getset), by their closure. */
static PyObject *model_get(mk_model_object *self, void *which) {
    MK_REQUIRE(self->model, "Model", NULL);
    mk_model *m = self->model;
    switch ((intptr_t)which) {
    case GET_BACKEND: return PyUnicode_FromString(mk_model_backend(m)->name);
    case GET_FUSED_HEAD: return PyBool_FromLong(mk_model_fused_policy_head(m));
    case GET_STREAM: return PyLong_FromVoidPtr(mk_model_stream(m)); /* 0: the legacy default */
    case GET_COPY_STREAM: return PyLong_FromVoidPtr(mk_model_copy_stream(m)); /* 0: none */
    case GET_BATCH_SCANS: return PyLong_FromLongLong(mk_model_batch_scans(m));
    default: return PyLong_FromSize_t(mk_model_arena_bytes(m));
    }
}

/* arena_bytes_for(B, L) -> (bytes, scratch bytes) of the activation arena a step on a
 * batch of B positions and L legal slots would allocate; the size checks a step makes
 * (MemoryError / ValueError naming B and L), without allocating: tests reach the
 * checked arithmetic of model.c with shapes no machine could hold. */
static PyObject *model_arena_bytes_for(mk_model_object *self, PyObject *args) {
    MK_REQUIRE(self->model, "Model", NULL);
    long long B, L;
    if (!PyArg_ParseTuple(args, "LL", &B, &L)) return NULL;
    size_t bytes, work;
    mk_status st = mk_model_arena_bytes_for(self->model, B, L, &bytes, &work);
    if (st != MK_OK) return mk_raise_status(st);
    return Py_BuildValue("(nn)", (Py_ssize_t)bytes, (Py_ssize_t)work);
}

static PyMethodDef module_functions[] = {
    {"check_model_config", (PyCFunction)(void (*)(void))py_check_model_config,
     METH_VARARGS | METH_KEYWORDS,
     "check_model_config(num_tokens, ..., move_pairs, board_width, board_height, board_kinds, move_hidden, move_shared, move_hidden_gate, move_kinds, value_hidden, value_power_sums) -> the fields as Python ints"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef model_methods[] = {
    {"tensors", (PyCFunction)model_tensors, METH_NOARGS, "[(name, shape, decay)] in order."},
    {"param_groups", (PyCFunction)model_param_groups, METH_NOARGS,
     "[(name, kind, decay, offset, size, [tensor names])] in placement order (floats)."},
    {"view", (PyCFunction)model_view, METH_O, "view(name): the live parameter (host memory)."},
    {"address", (PyCFunction)model_address, METH_O,
     "address(name) -> (pointer, shape) of the live parameter in the backend's memory."},
    {"read", (PyCFunction)model_read, METH_VARARGS, "read(name, grad=False): a copy."},
    {"write", (PyCFunction)model_write, METH_VARARGS, "write(name, array): set a parameter."},
    {"write_all", (PyCFunction)model_write_all, METH_O,
     "write_all([(name, array), ...]): set those parameters, all or none."},
    {"forward", (PyCFunction)model_forward, METH_O,
     "forward(batch) -> (logits, value) for a _core.Batch."},
    {"loss_and_grad", (PyCFunction)model_loss_and_grad, METH_VARARGS,
     "loss_and_grad(batch, value_weight) -> stats; the gradients stay in the model."},
    {"arena_bytes_for", (PyCFunction)model_arena_bytes_for, METH_VARARGS,
     "arena_bytes_for(B, L) -> (bytes, scratch): the arena a step on (B, L) allocates."},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef model_getset[] = {
    {"backend", (getter)model_get, NULL, "the backend's name", (void *)GET_BACKEND},
    {"arena_bytes", (getter)model_get, NULL, "bytes of activation arena", (void *)GET_ARENA},
    {"batch_scans", (getter)model_get, NULL,
     "batches whose every entry this model checked (a loader's batch, checked by its "
     "producer, is not counted)", (void *)GET_BATCH_SCANS},
    {"fused_head", (getter)model_get, NULL,
     "True if the training step runs the fused policy head", (void *)GET_FUSED_HEAD},
    {"stream", (getter)model_get, NULL,
     "the stream the model's steps run on (a cudaStream_t as an int; 0: legacy default)",
     (void *)GET_STREAM},
    {"copy_stream", (getter)model_get, NULL,
     "the batch copy stream (a cudaStream_t as an int; 0 when the backend has none)",
     (void *)GET_COPY_STREAM},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject mk_model_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._core.Model",
    .tp_basicsize = sizeof(mk_model_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C network (use manaka.Model).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)model_init,
    .tp_dealloc = (destructor)model_dealloc,
    .tp_methods = model_methods,
    .tp_getset = model_getset,
};

int mk_init_model(PyObject *module) {
    mk_set_num_threads(0); /* the default count; also pins OpenBLAS's pool (cpu/gemm.c) */
    if (PyType_Ready(&mk_model_type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Model", (PyObject *)&mk_model_type) < 0) return -1;
    if (PyModule_AddFunctions(module, module_functions) < 0) return -1;
    if (mk_init_batch(module) < 0) return -1;
    return mk_init_trainer(module);
}
