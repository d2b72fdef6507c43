/* _core.Trainer: AdamW state and the training step behind manaka.Trainer
 * (manaka/trainer.py holds the user-facing class). */
#include "model_binding.h"

typedef struct {
    PyObject_HEAD
    mk_model_object *model; /* strong reference: the trainer borrows its C model */
    mk_trainer *trainer;
} trainer_object;

/* An enum argument (schedule, pair_state_dtype) as its code. C holds the names and words
 * the error (mk_trainer_*_code); a value that is not a str is looked up as its str(), as
 * manaka.Trainer always did for schedule (so None is "got 'None'"), and one holding a NUL
 * as its repr() (which C would otherwise read only up to the NUL: never a name). */
static int enum_arg(PyObject *value, mk_status (*code_of)(const char *, const char *, int *),
                    const char *op, int *code) {
    PyObject *text = PyObject_Str(value);
    Py_ssize_t size;
    const char *name = text ? PyUnicode_AsUTF8AndSize(text, &size) : NULL;
    if (name && strlen(name) != (size_t)size) {
        Py_SETREF(text, PyObject_Repr(value));
        name = text ? PyUnicode_AsUTF8(text) : NULL;
    }
    mk_status st = name ? code_of(op, name, code) : MK_OK;
    Py_XDECREF(text);
    if (!name) return -1;
    return st == MK_OK ? 0 : (mk_raise_status(st), -1);
}

/* A step count (warmup_steps; total_steps, where None is *given = 0; step_count): the
 * binding converts its type only (mk_config_int_arg). Its rules are C's
 * (mk_trainer_config_check, mk_trainer_check_step_count); a value outside int64, which C
 * cannot hold, is refused here. */
static int steps_arg(PyObject *value, const char *op, const char *name, int64_t *out,
                     int *given) {
    if (given) *given = value != Py_None;
    if (given && value == Py_None) return *out = 0, 0;
    PyObject *v = mk_config_int_arg(value, op, name);
    if (!v) return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow)
        PyErr_Format(PyExc_ValueError, "%s: %s = %S does not fit in 64 bits", op, name, v);
    Py_DECREF(v);
    return overflow || PyErr_Occurred() ? -1 : 0;
}

/* Takes the enum keyword `key` (pair_state_dtype, pair_update, move_update) out of `rest`, a copy of the
 * keywords of __init__ or load (or NULL), so the rest parse as configure's: its code in
 * *code, which keeps its default when the keyword is absent. */
static int pop_enum(PyObject *rest, const char *op, const char *key,
                    mk_status (*code_of)(const char *, const char *, int *), int *code) {
    PyObject *value = rest ? PyDict_GetItemString(rest, key) : NULL; /* borrowed */
    if (!value) return 0;
    if (enum_arg(value, code_of, op, code) < 0) return -1;
    return PyDict_DelItemString(rest, key);
}

/* Parses the hyperparameters shared by __init__, configure and load into `cfg`, and
 * checks them (mk_trainer_config_check). */
static int parse_config(PyObject *args, PyObject *kwargs, mk_trainer_config *cfg,
                        PyObject **model) {
    static char *kw[] = {"model", "lr", "beta1", "beta2", "eps", "weight_decay", "warmup_steps",
                         "schedule", "total_steps", "min_lr", "value_weight", NULL};
    PyObject *warmup, *schedule, *total;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OdddddOOOdd", kw, model, &cfg->lr,
                                     &cfg->beta1, &cfg->beta2, &cfg->eps, &cfg->weight_decay,
                                     &warmup, &schedule, &total, &cfg->min_lr,
                                     &cfg->value_weight) ||
        steps_arg(warmup, "Trainer", "warmup_steps", &cfg->warmup_steps, NULL) < 0 ||
        steps_arg(total, "Trainer", "total_steps", &cfg->total_steps, &cfg->has_total_steps) < 0 ||
        enum_arg(schedule, mk_trainer_schedule_code, "Trainer", &cfg->schedule) < 0)
        return -1;
    mk_status st = mk_trainer_config_check(cfg);
    return st == MK_OK ? 0 : (mk_raise_status(st), -1);
}

static int trainer_init(trainer_object *self, PyObject *args, PyObject *kwargs) {
    mk_trainer_config cfg;
    PyObject *model;
    int pair_state = MK_PAIR_STATE_F32, pair_update = MK_PAIR_UPDATE_DENSE,
        move_update = MK_PAIR_UPDATE_DENSE;
    if (self->trainer) {
        PyErr_SetString(PyExc_RuntimeError, "_core.Trainer: already initialised");
        return -1;
    }
    PyObject *rest = kwargs ? PyDict_Copy(kwargs) : NULL;
    if (kwargs && !rest) return -1;
    int parsed = pop_enum(rest, "Trainer", "pair_state_dtype", mk_trainer_pair_state_code,
                          &pair_state) < 0 ||
                         pop_enum(rest, "Trainer", "pair_update", mk_trainer_pair_update_code,
                                  &pair_update) < 0 ||
                         pop_enum(rest, "Trainer", "move_update", mk_trainer_move_update_code,
                                  &move_update) < 0
                     ? -1
                     : parse_config(args, rest, &cfg, &model);
    Py_XDECREF(rest);
    if (parsed < 0) return -1;
    if (!PyObject_TypeCheck(model, &mk_model_type) || !((mk_model_object *)model)->model) {
        PyErr_Format(PyExc_TypeError, "Trainer: model must be a manaka Model, got %s",
                     Py_TYPE(model)->tp_name);
        return -1;
    }
    mk_trainer *trainer = NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_trainer_create(((mk_model_object *)model)->model, &cfg, pair_state, pair_update,
                               move_update, &trainer);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) return mk_raise_status(status), -1;
    Py_INCREF(model);
    self->model = (mk_model_object *)model;
    self->trainer = trainer;
    return 0;
}

static void trainer_dealloc(trainer_object *self) {
    /* A sparse trainer leaves rows behind their gaps: catch them up while the model is here
     * (unless another thread holds the model: its step runs on, and the rows stay behind). */
    if (self->trainer && (mk_trainer_pair_update(self->trainer) != MK_PAIR_UPDATE_DENSE ||
                          mk_trainer_move_update(self->trainer) != MK_PAIR_UPDATE_DENSE)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (mk_model_acquire(self->model, "Trainer") == 0) {
            mk_trainer_flush(self->trainer);
            mk_model_release(self->model);
        }
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    mk_trainer_destroy(self->trainer);
    Py_XDECREF(self->model);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* configure(model, lr, ...): replaces the hyperparameters (load_state_dict). */
static PyObject *trainer_configure(trainer_object *self, PyObject *args, PyObject *kwargs) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    mk_trainer_config cfg;
    PyObject *model;
    if (parse_config(args, kwargs, &cfg, &model) < 0) return NULL;
    if (mk_model_acquire(self->model, "Trainer.configure") < 0) return NULL; /* a step reads it */
    mk_status st = mk_trainer_set_config(self->trainer, &cfg);
    mk_model_release(self->model);
    if (st != MK_OK) return mk_raise_status(st);
    Py_RETURN_NONE;
}

/* load(model, exp_avg, exp_avg_sq, step_count, pair_state_dtype="float32", **hyperparameters):
 * Trainer.load_state_dict, all or nothing. exp_avg and exp_avg_sq are lists of (name,
 * array), each tensor once, as float32 whatever pair_state_dtype the state was saved with
 * (checked, then unused: the trainer keeps its own). Every
 * argument is checked and converted, and the model acquired, before anything changes: a
 * bad state or another thread's running step ("in use") leaves hyperparameters, moments and
 * step count as they were. Only a failed device copy can interrupt the writes; the
 * hyperparameters and step count are then still the old ones. */
static PyObject *trainer_load(trainer_object *self, PyObject *args, PyObject *kwargs) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    static const char op[] = "Trainer.load_state_dict";
    PyObject *model, *lists[2], *steps_obj;
    int64_t steps;
    mk_status st;
    if (!PyArg_ParseTuple(args, "OO!O!O", &model, &PyList_Type, &lists[0], &PyList_Type, &lists[1],
                          &steps_obj) ||
        steps_arg(steps_obj, op, "step_count", &steps, NULL) < 0)
        return NULL;
    if ((st = mk_trainer_check_step_count(op, steps)) != MK_OK) return mk_raise_status(st);
    mk_trainer_config cfg;
    PyObject *model_args = PyTuple_Pack(1, model), *ignored;
    PyObject *rest = kwargs && model_args ? PyDict_Copy(kwargs) : NULL;
    int saved_pair_state = MK_PAIR_STATE_F32; /* checked, then unused */
    int parsed = !model_args || (kwargs && !rest) ? -1
                 : pop_enum(rest, op, "pair_state_dtype", mk_trainer_pair_state_code,
                            &saved_pair_state) < 0
                     ? -1
                     : parse_config(model_args, rest, &cfg, &ignored);
    Py_XDECREF(rest);
    Py_XDECREF(model_args);
    if (parsed < 0) return NULL;
    int n = mk_model_num_tensors(self->model->model);
    PyArrayObject **arrays = calloc((size_t)(2 * n > 0 ? 2 * n : 1), sizeof *arrays);
    if (!arrays) return PyErr_NoMemory();
    PyObject *result = NULL;
    for (int kind = 0; kind < 2; kind++) {
        if (PyList_GET_SIZE(lists[kind]) != n) {
            PyErr_Format(PyExc_ValueError, "%s: %s has %zd tensors, the model %d", op,
                         kind ? "exp_avg_sq" : "exp_avg", PyList_GET_SIZE(lists[kind]), n);
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(lists[kind], i), *array;
            const char *name;
            int index;
            if (!PyArg_ParseTuple(item, "sO", &name, &array)) goto done;
            const mk_tensor *t = mk_tensor_named(self->model->model, name, op, &index);
            if (!t) goto done;
            if (arrays[kind * n + index]) {
                PyErr_Format(PyExc_ValueError, "%s: %s names %s twice", op,
                             kind ? "exp_avg_sq" : "exp_avg", name);
                goto done;
            }
            if (!(arrays[kind * n + index] = mk_tensor_arg(t, array, op))) goto done;
        }
    }
    if (mk_model_acquire(self->model, op) < 0) goto done;
    mk_status status = MK_OK;
    Py_BEGIN_ALLOW_THREADS;
    for (int k = 0; k < 2 * n && status == MK_OK; k++)
        status = mk_trainer_write_moment(self->trainer, k / n, k % n, PyArray_DATA(arrays[k]));
    Py_END_ALLOW_THREADS;
    /* With the GIL again: config() and lr_at() read the config under it, without the model. */
    if (status == MK_OK) status = mk_trainer_set_config(self->trainer, &cfg);
    if (status == MK_OK) status = mk_trainer_set_step_count(self->trainer, steps); /* checked */
    mk_model_release(self->model);
    if (status != MK_OK) mk_raise_status(status);
    else result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < 2 * n; k++) Py_XDECREF(arrays[k]);
    free(arrays);
    return result;
}

static PyObject *trainer_config(trainer_object *self, PyObject *unused) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    const mk_trainer_config *c = mk_trainer_get_config(self->trainer);
    PyObject *total =
        c->has_total_steps ? PyLong_FromLongLong(c->total_steps) : Py_NewRef(Py_None);
    return Py_BuildValue("{s:d,s:(dd),s:d,s:d,s:L,s:s,s:N,s:d,s:d}", "lr", c->lr, "betas",
                         c->beta1, c->beta2, "eps", c->eps, "weight_decay", c->weight_decay,
                         "warmup_steps", (long long)c->warmup_steps, "schedule",
                         mk_trainer_schedule_name(c->schedule), "total_steps", total, "min_lr",
                         c->min_lr,
                         "value_weight", c->value_weight);
}

/* step(batch) -> (stats, step): stats float32 [MK_STAT_COUNT], or None on a device backend
 * (the stats stay on the device: read_stats(step) fetches them); step, the 1-based number
 * of this step, read while the model is still held, so it is this step's even when
 * another thread steps or loads a state right after (a device Stats fetches the stats of
 * exactly that step).
 * backward(batch) -> (stats, rows), the first half of a step (mk_trainer_backward; then
 * manaka/distributed_trainer.py exchanges, and apply() finishes it): stats float32 [MK_STAT_COUNT]
 * on every backend, rows the number of pair-table rows the batch names (their ids and
 * gradient rows: pair_rows()). */
static PyObject *run_batch(trainer_object *self, PyObject *obj, int backward) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    mk_batch_hold hold;
    mk_batch batch;
    npy_intp dims[1] = {MK_STAT_COUNT};
    PyObject *stats = PyArray_ZEROS(1, dims, NPY_FLOAT32, 0);
    int slot = stats ? mk_model_batch_begin(self->model, "Trainer.step", obj, 1, &hold, &batch)
                     : -2;
    if (slot < -1) return Py_XDECREF(stats), NULL;
    float *out = PyArray_DATA((PyArrayObject *)stats);
    mk_status status;
    int64_t count = 0; /* the step's number, or the rows */
    Py_BEGIN_ALLOW_THREADS;
    if (backward) {
        status = mk_trainer_backward(self->trainer, &batch, out, &count);
    } else {
        status = mk_trainer_step(self->trainer, &batch, out);
        count = mk_trainer_step_count(self->trainer);
    }
    Py_END_ALLOW_THREADS;
    mk_model_batch_end(self->model, slot, &hold);
    if (status != MK_OK) return Py_DECREF(stats), mk_raise_status(status);
    if (!backward && !mk_model_backend(self->model->model)->host_memory)
        Py_SETREF(stats, Py_NewRef(Py_None));
    return Py_BuildValue("(NL)", stats, (long long)count);
}

static PyObject *trainer_step(trainer_object *self, PyObject *obj) { return run_batch(self, obj, 0); }
static PyObject *trainer_backward(trainer_object *self, PyObject *obj) { return run_batch(self, obj, 1); }

/* A device buffer as a __cuda_array_interface__ dict (version 3, no stream: the backward
 * that wrote it synchronised the model's stream before returning). */
static PyObject *cuda_interface(const void *ptr, const char *typestr, Py_ssize_t n0,
                                Py_ssize_t n1, int ndim) {
    PyObject *shape = ndim == 1 ? Py_BuildValue("(n)", n0) : Py_BuildValue("(nn)", n0, n1);
    if (!shape) return NULL;
    return Py_BuildValue("{s:N,s:s,s:(Ni),s:i,s:O}", "shape", shape, "typestr", typestr, "data",
                         PyLong_FromVoidPtr((void *)ptr), 0, "version", 3, "strides", Py_None);
}

/* dense_grads() -> the dense range of the model's gradient buffer (mk_trainer_dense_range),
 * float32 [n]: a writable NumPy view on a host backend (the exchange sums into it in
 * place; it keeps this trainer alive), a __cuda_array_interface__ dict on a device. */
static PyObject *trainer_dense_grads(trainer_object *self, PyObject *unused) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    int64_t offset, size;
    mk_trainer_dense_range(self->trainer, &offset, &size);
    float *g = mk_model_grads(self->model->model) + offset;
    if (!mk_model_backend(self->model->model)->host_memory)
        return cuda_interface(g, "<f4", (Py_ssize_t)size, 0, 1);
    npy_intp dims[1] = {(npy_intp)size};
    return mk_array_view(1, dims, NPY_FLOAT32, g, (PyObject *)self);
}

/* pair_rows(rows) -> (ids int64 [rows], grads float32 [rows, P]) of the last backward:
 * copies on a host backend, __cuda_array_interface__ dicts of the trainer's buffers (valid
 * until the next backward) on a device. */
static PyObject *trainer_pair_rows(trainer_object *self, PyObject *arg) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    const int64_t *ids;
    const float *grads;
    mk_trainer_pair_rows(self->trainer, &ids, &grads);
    int64_t P = mk_model_config(self->model->model)->pair_dim;
    if (n < 0 || (n > 0 && !ids)) {
        PyErr_Format(PyExc_ValueError, "Trainer.pair_rows: no %lld rows from a backward", n);
        return NULL;
    }
    if (!mk_model_backend(self->model->model)->host_memory)
        return Py_BuildValue("(NN)", cuda_interface(ids, "<i8", (Py_ssize_t)n, 0, 1),
                             cuda_interface(grads, "<f4", (Py_ssize_t)n, (Py_ssize_t)P, 2));
    npy_intp d1[1] = {(npy_intp)n}, d2[2] = {(npy_intp)n, (npy_intp)P};
    PyObject *a = PyArray_EMPTY(1, d1, NPY_INT64, 0), *b = PyArray_EMPTY(2, d2, NPY_FLOAT32, 0);
    if (!a || !b) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    if (n > 0) {
        memcpy(PyArray_DATA((PyArrayObject *)a), ids, (size_t)n * sizeof(int64_t));
        memcpy(PyArray_DATA((PyArrayObject *)b), grads, (size_t)(n * P) * sizeof(float));
    }
    return Py_BuildValue("(NN)", a, b);
}

/* apply(ids, grads, stats) -> stats: ids int64 [n] and grads float32 [n, P] NumPy arrays on
 * a host backend, or (on a device) the integers of device pointers, with n = len(ids)
 * given as a fourth argument; stats float32 [MK_STAT_COUNT] (host), written back with the
 * step's lr. Returns (stats, step). */
static PyObject *trainer_apply(trainer_object *self, PyObject *args) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    static const char op[] = "Trainer.apply";
    PyObject *ids_obj, *grads_obj, *stats_obj;
    long long n_given = -1;
    if (!PyArg_ParseTuple(args, "OOO|L", &ids_obj, &grads_obj, &stats_obj, &n_given)) return NULL;
    const int host = mk_model_backend(self->model->model)->host_memory;
    int64_t P = mk_model_config(self->model->model)->pair_dim;
    PyArrayObject *ids = NULL, *grads = NULL, *stats = NULL;
    PyObject *out = NULL;
    const int64_t *ids_ptr;
    const float *grads_ptr;
    int64_t n;
    stats = (PyArrayObject *)PyArray_FROMANY(stats_obj, NPY_FLOAT32, 1, 1,
                                             NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ENSURECOPY);
    if (!stats) goto done;
    if (PyArray_DIM(stats, 0) != MK_STAT_COUNT) {
        PyErr_Format(PyExc_ValueError, "%s: stats must hold %d floats, got %zd", op, MK_STAT_COUNT,
                     (Py_ssize_t)PyArray_DIM(stats, 0));
        goto done;
    }
    if (host) {
        ids = (PyArrayObject *)PyArray_FROMANY(ids_obj, NPY_INT64, 1, 1, NPY_ARRAY_C_CONTIGUOUS);
        if (!ids) goto done;
        grads = (PyArrayObject *)PyArray_FROMANY(grads_obj, NPY_FLOAT32, 2, 2,
                                                 NPY_ARRAY_C_CONTIGUOUS);
        if (!grads) goto done;
        n = PyArray_DIM(ids, 0);
        if (PyArray_DIM(grads, 0) != n || PyArray_DIM(grads, 1) != P) {
            PyErr_Format(PyExc_ValueError, "%s: grads must be [%lld, %lld] for %lld row ids, got "
                         "[%zd, %zd]", op, (long long)n, (long long)P, (long long)n,
                         (Py_ssize_t)PyArray_DIM(grads, 0), (Py_ssize_t)PyArray_DIM(grads, 1));
            goto done;
        }
        ids_ptr = PyArray_DATA(ids);
        grads_ptr = PyArray_DATA(grads);
    } else {
        ids_ptr = PyLong_AsVoidPtr(ids_obj);
        if (PyErr_Occurred()) goto done;
        grads_ptr = PyLong_AsVoidPtr(grads_obj);
        if (PyErr_Occurred()) goto done;
        if (n_given < 0) {
            PyErr_Format(PyExc_ValueError, "%s: a device trainer takes the row count", op);
            goto done;
        }
        n = n_given;
    }
    if (mk_model_acquire(self->model, op) < 0) goto done;
    mk_status status;
    int64_t step;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_trainer_apply(self->trainer, ids_ptr, grads_ptr, n, PyArray_DATA(stats));
    step = mk_trainer_step_count(self->trainer);
    Py_END_ALLOW_THREADS;
    mk_model_release(self->model);
    if (status != MK_OK) mk_raise_status(status);
    else out = Py_BuildValue("(OL)", (PyObject *)stats, (long long)step);
done:
    Py_XDECREF(ids);
    Py_XDECREF(grads);
    Py_XDECREF(stats);
    return out;
}

/* read_stats(step) -> float32 [MK_STAT_COUNT]: a device backend's stats of that step. */
static PyObject *trainer_read_stats(trainer_object *self, PyObject *arg) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    long long step = PyLong_AsLongLong(arg);
    if (step == -1 && PyErr_Occurred()) return NULL;
    npy_intp dims[1] = {MK_STAT_COUNT};
    PyObject *stats = PyArray_ZEROS(1, dims, NPY_FLOAT32, 0);
    if (!stats) return NULL;
    if (mk_model_acquire(self->model, "Stats") < 0) {
        Py_DECREF(stats);
        return NULL;
    }
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_trainer_read_stats(self->trainer, step, PyArray_DATA((PyArrayObject *)stats));
    Py_END_ALLOW_THREADS;
    mk_model_release(self->model);
    if (status != MK_OK) {
        Py_DECREF(stats);
        return mk_raise_status(status);
    }
    return stats;
}

static const mk_tensor *moment_tensor(trainer_object *self, PyObject *args, int *kind,
                                      PyObject **value, const char *op, int *index) {
    const char *name;
    if (value) *value = NULL;
    if (!PyArg_ParseTuple(args, value ? "is|O" : "is", kind, &name, value)) return NULL;
    if (*kind != 0 && *kind != 1) {
        PyErr_Format(PyExc_ValueError, "%s: moment kind must be 0 (exp_avg) or 1 (exp_avg_sq)", op);
        return NULL;
    }
    return mk_tensor_named(self->model->model, name, op, index);
}

/* read_moment(kind, name) -> a copy of exp_avg (0) or exp_avg_sq (1) of that tensor. */
static PyObject *trainer_read_moment(trainer_object *self, PyObject *args) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    static const char op[] = "Trainer.state_dict";
    int kind, index;
    if (!moment_tensor(self, args, &kind, NULL, op, &index)) return NULL;
    return mk_tensor_copy(self->model, op, index, NULL, self->trainer, kind);
}

/* write_moment(kind, name, array) */
static PyObject *trainer_write_moment(trainer_object *self, PyObject *args) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    static const char op[] = "Trainer.load_state_dict";
    int kind, index;
    PyObject *value;
    if (!moment_tensor(self, args, &kind, &value, op, &index)) return NULL;
    return mk_tensor_copy(self->model, op, index, value, self->trainer, kind);
}

static PyObject *trainer_lr_at(trainer_object *self, PyObject *arg) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    long long step = PyLong_AsLongLong(arg);
    if (step == -1 && PyErr_Occurred()) return NULL;
    if (step < 0) {
        PyErr_SetString(PyExc_ValueError, "Trainer.lr_at: step must be >= 0");
        return NULL;
    }
    return PyFloat_FromDouble((double)(float)mk_trainer_lr_at(mk_trainer_get_config(self->trainer), step));
}

static PyObject *trainer_profile(trainer_object *self, PyObject *arg) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    int enable = PyObject_IsTrue(arg);
    if (enable < 0) return NULL;
    mk_trainer_profile(self->trainer, enable);
    Py_RETURN_NONE;
}

static PyObject *trainer_times(trainer_object *self, PyObject *unused) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    mk_phase_times t = mk_trainer_times(self->trainer);
    return Py_BuildValue("{s:L,s:d,s:d,s:d,s:d}", "steps", (long long)t.steps, "forward",
                         t.forward, "backward", t.backward, "optimizer", t.optimizer,
                         "optimizer_pair_table", t.optimizer_pair_table);
}

static PyObject *trainer_moment_bytes(trainer_object *self, PyObject *unused) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    return PyLong_FromSize_t(mk_trainer_state_bytes(self->trainer));
}

enum { PROP_STEP_COUNT, PROP_FUSED, PROP_PAIR_STATE, PROP_PAIR_UPDATE, PROP_MOVE_UPDATE };

/* The properties (trainer_getset), by their closure. Getters read without the model: a
 * step on another thread may be running (it returns its own step number, see run_batch);
 * an int64 read there is a value from just before or after. */
static PyObject *trainer_get(trainer_object *self, void *which) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    mk_trainer *t = self->trainer;
    switch ((intptr_t)which) {
    case PROP_STEP_COUNT: return PyLong_FromLongLong(mk_trainer_step_count(t));
    case PROP_FUSED: return PyBool_FromLong(mk_trainer_fused(t));
    case PROP_PAIR_STATE: return PyUnicode_FromString(mk_trainer_pair_state_name(mk_trainer_pair_state(t)));
    case PROP_MOVE_UPDATE: return PyUnicode_FromString(mk_trainer_pair_update_name(mk_trainer_move_update(t)));
    default: return PyUnicode_FromString(mk_trainer_pair_update_name(mk_trainer_pair_update(t)));
    }
}

/* step_count and fused, set with the model held: a step moves the one and reads the other. */
static int trainer_set(trainer_object *self, PyObject *value, void *which) {
    MK_REQUIRE(self->trainer, "Trainer", -1);
    const int steps = (intptr_t)which == PROP_STEP_COUNT;
    int64_t n = 0;
    int on = 0;
    if (!value) {
        PyErr_Format(PyExc_TypeError, "Trainer: %s cannot be deleted", steps ? "step_count" : "fused");
        return -1;
    }
    if (steps ? steps_arg(value, "Trainer", "step_count", &n, NULL) < 0 : (on = PyObject_IsTrue(value)) < 0)
        return -1;
    if (mk_model_acquire(self->model, steps ? "Trainer.step_count" : "Trainer.fused") < 0) return -1;
    mk_status st = MK_OK;
    if (steps) st = mk_trainer_set_step_count(self->trainer, n);
    else mk_trainer_set_fused(self->trainer, on);
    mk_model_release(self->model);
    return st == MK_OK ? 0 : (mk_raise_status(st), -1);
}

/* flush(): every row of the sparse tables caught up to the current step (pair_update or
 * move_update "sparse" / "lazy"; a no-op when both are "dense"). */
static PyObject *trainer_flush(trainer_object *self, PyObject *unused) {
    MK_REQUIRE(self->trainer, "Trainer", NULL);
    if (mk_model_acquire(self->model, "Trainer.flush") < 0) return NULL;
    mk_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = mk_trainer_flush(self->trainer);
    Py_END_ALLOW_THREADS;
    mk_model_release(self->model);
    if (st != MK_OK) return mk_raise_status(st);
    Py_RETURN_NONE;
}

static PyMethodDef trainer_methods[] = {
    {"flush", (PyCFunction)trainer_flush, METH_NOARGS,
     "catches every row of the sparse tables up to the current step (sparse / lazy updates)"},
    {"step", (PyCFunction)trainer_step, METH_O, "step(batch) -> (stats or None, step)."},
    {"read_stats", (PyCFunction)trainer_read_stats, METH_O, NULL},
    {"backward", (PyCFunction)trainer_backward, METH_O, "backward(batch) -> (stats, rows)"},
    {"dense_grads", (PyCFunction)trainer_dense_grads, METH_NOARGS, NULL},
    {"pair_rows", (PyCFunction)trainer_pair_rows, METH_O, NULL},
    {"apply", (PyCFunction)trainer_apply, METH_VARARGS,
     "apply(ids, grads, stats[, n]) -> (stats, step)"},
    {"config", (PyCFunction)trainer_config, METH_NOARGS, NULL},
    {"configure", (PyCFunction)(void (*)(void))trainer_configure, METH_VARARGS | METH_KEYWORDS, NULL},
    {"load", (PyCFunction)(void (*)(void))trainer_load, METH_VARARGS | METH_KEYWORDS,
     "load(model, exp_avg, exp_avg_sq, step_count, pair_state_dtype, **hyperparameters): "
     "all or nothing"},
    {"read_moment", (PyCFunction)trainer_read_moment, METH_VARARGS, NULL},
    {"write_moment", (PyCFunction)trainer_write_moment, METH_VARARGS, NULL},
    {"lr_at", (PyCFunction)trainer_lr_at, METH_O, NULL},
    {"profile", (PyCFunction)trainer_profile, METH_O, NULL},
    {"times", (PyCFunction)trainer_times, METH_NOARGS, NULL},
    {"moment_bytes", (PyCFunction)trainer_moment_bytes, METH_NOARGS,
     "bytes of device memory held by the AdamW moments"},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef trainer_getset[] = {
    {"pair_update", (getter)trainer_get, NULL,
     "'dense', 'sparse' or 'lazy': which pair-table rows a step updates", (void *)PROP_PAIR_UPDATE},
    {"move_update", (getter)trainer_get, NULL,
     "'dense', 'sparse' or 'lazy': which move-table rows a step updates", (void *)PROP_MOVE_UPDATE},
    {"step_count", (getter)trainer_get, (setter)trainer_set, NULL, (void *)PROP_STEP_COUNT},
    {"fused", (getter)trainer_get, (setter)trainer_set,
     "pair-table gradient fused with its AdamW update (default True)", (void *)PROP_FUSED},
    {"pair_state_dtype", (getter)trainer_get, NULL,
     "storage of the pair table's AdamW moments: 'float32' or 'bf16'", (void *)PROP_PAIR_STATE},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject trainer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "manaka._core.Trainer",
    .tp_basicsize = sizeof(trainer_object),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "AdamW and the training step in C (use manaka.Trainer).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)trainer_init,
    .tp_dealloc = (destructor)trainer_dealloc,
    .tp_methods = trainer_methods,
    .tp_getset = trainer_getset,
};

static PyObject *stat_layout(void) {
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "loss", MK_STAT_LOSS, "policy_loss",
                         MK_STAT_POLICY_LOSS, "value_loss", MK_STAT_VALUE_LOSS, "accuracy",
                         MK_STAT_ACCURACY, "lr", MK_STAT_LR, "finite", MK_STAT_FINITE, "size",
                         MK_STAT_COUNT);
}

int mk_init_trainer(PyObject *module) {
    if (PyType_Ready(&trainer_type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Trainer", (PyObject *)&trainer_type) < 0) return -1;
    PyObject *layout = stat_layout();
    if (!layout || PyModule_AddObject(module, "STATS", layout) < 0) {
        Py_XDECREF(layout);
        return -1;
    }
    return 0;
}
