/* Shared by model_binding.c and trainer_binding.c: the Model object and batch arguments. */
#ifndef MANAKA_MODEL_BINDING_H
#define MANAKA_MODEL_BINDING_H
#include "python/common/binding.h"
#include "python/common/engine_link.h" /* mk_backend_from_arg */
#include "core/batch.h"
#include "core/staging_slots.h"
#include "core/model.h"

/* _core.Model. `busy` is set (under the GIL) while a call runs without the GIL, so a second
 * thread using the same model gets an error instead of a data race. `keep[slot]` holds the
 * GPU arrays of the device batch that last read that batch slot (manaka._cuda's
 * _DeviceBatch) until that step has finished on the device: the caller may drop its
 * arrays as soon as step() returns. */
typedef struct {
    PyObject_HEAD
    mk_model *model;
    int busy;
    PyObject *keep[MK_STAGING_SLOTS];
} mk_model_object;

extern PyTypeObject mk_model_type;

/* 0 and busy set, or -1 with RuntimeError if another thread is using the model. */
int mk_model_acquire(mk_model_object *self, const char *op);
void mk_model_release(mk_model_object *self);

/* What a batch argument holds while a call reads it: the arrays it was converted to, or
 * the loader pinned (a loader's batch, read in its slot). Released with
 * mk_batch_args_release. */
typedef struct {
    PyArrayObject *a[6];
    PyObject *pin;
} mk_batch_args;

/* Converts (tokens, legal, counts[, target, value, policy_target]) into `batch`, checking
 * dtypes, dimensions and that shapes agree. target/value may be NULL (forward only);
 * policy_target may be None. Range checks are mk_batch_check's job (in C, on any path).
 *
 * `loaded` (NULL or None: none) is the _core.LoadedBatch of a manaka.Batch the loader made:
 * when the arrays are still its own views and its slot is still held (mk_loaded_batch),
 * `batch` is the slot's, as its producer checked it, and nothing is converted or copied;
 * else the arrays are converted as any others. */
int mk_batch_from_args(const char *op, PyObject *tokens, PyObject *legal, PyObject *counts,
                       PyObject *target, PyObject *value, PyObject *policy_target,
                       PyObject *loaded, mk_batch_args *held, mk_batch *batch);
void mk_batch_args_release(mk_batch_args *held);

/* _core.check_batch (batch_binding.c): Model.loss_and_grad's conversion and checks of a
 * host batch, for a loss computed elsewhere. */
PyObject *mk_py_check_batch(PyObject *self, PyObject *args);

/* loader_binding.c: 1 and *batch = the slot's mk_batch (only the fields given non-NULL),
 * with the loader pinned in *pin (no next() or start() until mk_loaded_batch_unpin), when
 * `handle` is a current _core.LoadedBatch and given[] (tokens, legal, counts, target, value,
 * policy_target; NULL = not read by this call, None = absent) are its own views, unchanged;
 * 0 when not (stale, or a field replaced or reshaped); -1 with TypeError when `handle` is
 * not a LoadedBatch. */
int mk_loaded_batch(PyObject *handle, PyObject *const given[6], mk_batch *batch, PyObject **pin);
void mk_loaded_batch_unpin(PyObject *pin);

/* A batch whose arrays are on the device, from a _DeviceBatch's `batch`: a capsule named
 * MK_BATCH_CAPSULE (a TypeError for anything else) of the mk_batch that
 * manaka._cuda.device_batch parsed; on_device = 1, and it is checked on the device. */
int mk_batch_from_device(const char *op, PyObject *holder, mk_batch *batch);

/* Around a call that stages a batch: batch_begin acquires the model, waits for the step
 * that last read the slot the call will take and releases that step's device arrays;
 * returns the slot (-1 on a host-memory backend), or -2 with an exception set and the
 * model not acquired. batch_end keeps `holder` (NULL for a host batch) for that slot and
 * releases the model. */
int mk_model_batch_begin(mk_model_object *self, const char *op);
void mk_model_batch_end(mk_model_object *self, int slot, PyObject *holder);

/* The model's tensor named `name` (its position in *index when index is not NULL), or
 * NULL with a KeyError naming `op`. */
const mk_tensor *mk_tensor_named(mk_model *model, const char *name, const char *op,
                                 int *index);
/* A new, uninitialised float32 NumPy array of t's shape (NULL with an exception). */
PyObject *mk_tensor_empty(const mk_tensor *t);

/* Checks `value` is a float32 array of exactly t's shape; new reference, or NULL with
 * an exception naming the tensor. */
PyArrayObject *mk_tensor_arg(const mk_tensor *t, PyObject *value, const char *op);

/* An int argument of a configuration as a Python int (new reference): a Python int or
 * anything with __index__ (a NumPy integer), not a bool; else NULL with a TypeError
 * "<op>: <name> must be an int, got <type>". Its rules are C's. */
PyObject *mk_config_int_arg(PyObject *obj, const char *op, const char *name);

int mk_init_trainer(PyObject *module);
#endif
