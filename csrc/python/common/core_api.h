/* mk_core_api: what manaka._core lends another extension at run time: the test hooks of
 * manaka._testing (csrc/python/testing/), which run _core's op tables entry by entry, and
 * manaka._cuda, whose failures must be written where _core reads them
 * (csrc/python/cuda/core_error.c).
 *
 * Why a table of pointers instead of linking the engine into _testing: the hooks must run
 * the very engine the package runs, with its state. A second copy of core/ and cpu/ in
 * _testing would have its own thread-local mk_error() buffer (a CPU entry's failure would
 * be written where the hook does not read it), its own thread count (mk.set_num_threads()
 * would not reach the GEMM that tests/test_gemm.py holds to the same bits for every count)
 * and its own OpenBLAS settings. So _testing links no engine code: it gets this struct
 * from the capsule manaka._core._api (PyCapsule_Import), and the tables it returns are
 * _core's own, as the CUDA table reaches _core from manaka._cuda as a capsule
 * (MK_BACKEND_CAPSULE, csrc/python/cuda/cuda_backend.c).
 *
 * Each function field has the type of the function it points to (__typeof__), so when a
 * prototype changes the field changes with it and a hook that no longer fits fails to
 * compile instead of calling through a stale type. The sizes let _testing refuse a _core
 * built from other sources (one extension rebuilt, not the other) with a clear ImportError
 * rather than misread a struct. */
#ifndef MANAKA_CORE_API_H
#define MANAKA_CORE_API_H
#include "python/common/binding.h"
#include "core/backend.h"
#include "core/batch.h"

/* The op table a backend argument names: a str ("cpu", "cpu_staged"; NULL: "cpu") or a
 * capsule of another extension's table (manaka._cuda); NULL with an exception set if
 * neither, or if the table is incomplete (model_binding.c). */
const mk_backend *mk_backend_from_arg(PyObject *arg);

#define MK_CORE_API_CAPSULE "manaka._core._api" /* module + attribute, as PyCapsule_Import wants */

typedef struct {
    size_t size;         /* sizeof(mk_core_api) */
    size_t backend_size; /* sizeof(mk_backend) */
    size_t batch_size;   /* sizeof(mk_batch) */
    __typeof__(&mk_error) error;                       /* _core's per-thread message */
    __typeof__(&mk_fail) fail;                         /* ... and its writer */
    __typeof__(&mk_backend_from_arg) backend_from_arg; /* _core's tables, or a capsule's */
    __typeof__(&mk_batch_check) batch_check;           /* the host batch check (batch.c) */
} mk_core_api;

/* _core's table for the extension `who` ("manaka._testing"): NULL with ImportError when
 * _core cannot be imported or was built from other sources than `who` (one extension
 * rebuilt, not the other), which would misread the structs. */
static inline const mk_core_api *mk_import_core_api(const char *who) {
    const mk_core_api *api = PyCapsule_Import(MK_CORE_API_CAPSULE, 0);
    if (api && (api->size != sizeof(mk_core_api) || api->backend_size != sizeof(mk_backend) ||
                api->batch_size != sizeof(mk_batch))) {
        PyErr_Format(PyExc_ImportError,
                     "%s was built against another manaka._core (its engine table has size %zu, "
                     "mk_backend %zu, mk_batch %zu; here: %zu, %zu, %zu): rebuild both "
                     "(python setup.py build_ext --inplace)",
                     who, api->size, api->backend_size, api->batch_size, sizeof(mk_core_api),
                     sizeof(mk_backend), sizeof(mk_batch));
        return NULL;
    }
    return api;
}

/* Adds the capsule manaka._core._api to `module`: 0, or -1 with an exception. */
int mk_init_core_api(PyObject *module);

#endif
