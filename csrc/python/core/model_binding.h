/* Shared by model_binding.c and trainer_binding.c: the Model object and batch arguments. */
#ifndef MANAKA_MODEL_BINDING_H
#define MANAKA_MODEL_BINDING_H
#include "python/common/binding.h"
#include "python/common/engine_link.h" /* mk_backend_from_arg */
#include "core/batch.h"
#include "core/staging_slots.h"
#include "core/model.h"
#include "core/trainer.h"
#include "data/loader.h"

/* _core.Model. `busy` is set (under the GIL) while a call runs without the GIL, so a second
 * thread using the same model gets an error instead of a data race. `keep[slot]` holds the
 * owner of the device arrays of the on-device Batch that last read that batch slot (for
 * manaka._cuda.device_batch's, its _DeviceBatch) until that step has finished on the
 * device: the caller may drop its arrays as soon as step() returns. */
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

/* _core.Batch (batch_binding.c): one batch, as every model and trainer entry takes it.
 * `field`: tokens, legal, counts, target, value, policy_target (NULL: absent), NumPy
 * arrays converted to int32 / float32, or GPU arrays as given. `loader` (a _core.Loader)
 * while the fields are the views of the slot `batch` it made (serial: the loader's serial
 * then); `owner` for a batch whose arrays are in a device backend's memory, `batch`
 * pointing at them, kept alive by it. */
enum { MK_BATCH_FIELDS = 6 };
typedef struct {
    PyObject_HEAD
    PyObject *field[MK_BATCH_FIELDS];
    PyObject *loader;
    uint64_t serial;
    PyObject *owner;
    mk_batch batch;
} mk_batch_object;

extern PyTypeObject mk_batch_type;

/* What a call holds while it reads a batch: private copies of the host arrays, the loader
 * pinned (its slot read in place), or the owner of device arrays. */
typedef struct {
    PyArrayObject *a[MK_BATCH_FIELDS];
    PyObject *pin, *owner;
} mk_batch_hold;

/* The mk_batch a call reads from `obj` (a TypeError naming `op` unless a _core.Batch):
 * an on-device batch's struct; a loader's slot while mk_loaded_batch vouches for it; else
 * private copies of the index arrays, the float arrays in place, shapes compared (GPU
 * arrays here are a TypeError naming `device`, the model's). with_targets = 0: tokens,
 * legal and counts only. Range checks are mk_batch_check's (in C, on any path). Release
 * with mk_batch_release. */
int mk_batch_take(const char *op, PyObject *obj, int with_targets, const char *device,
                  mk_batch_hold *hold, mk_batch *out);
void mk_batch_release(mk_batch_hold *hold);

/* loader_binding.c: 1 and *out = the slot's mk_batch, with the loader pinned in *pin (no
 * next() or start() until mk_loaded_batch_unpin), when b's slot is still the one the
 * consumer holds and its fields are its views, unchanged in place; 0 when not. */
int mk_loaded_batch(mk_batch_object *b, mk_batch *out, PyObject **pin);
int mk_loaded_batch_current(mk_batch_object *b);
void mk_loaded_batch_unpin(PyObject *pin);
int mk_init_batch(PyObject *module);

/* Around a call that reads the batch `obj` with the GIL released: batch_begin takes it
 * (mk_batch_take: *batch, held in *hold), acquires the model, waits for the step that last
 * read the slot the call will take and releases that step's device arrays; returns the
 * slot (-1 on a host-memory backend), or -2 with an exception set and nothing held.
 * batch_end keeps an on-device batch's owner for that slot (the step may still read its
 * arrays), then releases the model and the batch. */
int mk_model_batch_begin(mk_model_object *self, const char *op, PyObject *obj, int with_targets,
                         mk_batch_hold *hold, mk_batch *batch);
void mk_model_batch_end(mk_model_object *self, int slot, mk_batch_hold *hold);

/* The model's tensor named `name` (its position in *index when index is not NULL), or
 * NULL with a KeyError naming `op`. */
const mk_tensor *mk_tensor_named(mk_model *model, const char *name, const char *op,
                                 int *index);
/* A new, uninitialised float32 NumPy array of t's shape (NULL with an exception). */
PyObject *mk_tensor_empty(const mk_tensor *t);

/* Checks `value` is a float32 array of exactly t's shape; new reference, or NULL with
 * an exception naming the tensor. */
PyArrayObject *mk_tensor_arg(const mk_tensor *t, PyObject *value, const char *op);

/* Copies tensor `index` between a host array and the backend's memory, with the model held
 * and the GIL released: `value` NULL reads it into a new array (returned), else `value`,
 * checked against the tensor (mk_tensor_arg), is written (None returned). `moments` NULL:
 * the parameters (kind 0) or, read only, their last gradient (kind 1); else that trainer's
 * AdamW moment `kind` (0 exp_avg, 1 exp_avg_sq). NULL with an exception naming `op`. */
PyObject *mk_tensor_copy(mk_model_object *self, const char *op, int index, PyObject *value,
                         mk_trainer *moments, int kind);

int mk_init_trainer(PyObject *module);

/* dataset_binding.c: the dataset's arrays obj = (tokens, legal_offsets, legal_moves, target,
 * value, policy_target or None) as *view over vocabularies V and M (0: none), read in place
 * (by other threads too: no copy of a memory-mapped file is made; the caller keeps obj
 * alive): exact dtypes and dimensions, C-contiguous, aligned, lengths agreeing. 0, or -1
 * with an exception naming `op` and the array. */
int mk_dataset_arg(const char *op, PyObject *const obj[6], int64_t V, int64_t M,
                   mk_dataset_view *view);
#endif
