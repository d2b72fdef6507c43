/* One engine for the three extensions. manaka._core holds the engine (core/, data/, cpu/,
 * shogi/) and the argument conversion (python/common/); manaka/__init__.py loads it with
 * RTLD_GLOBAL, so manaka._cuda and manaka._testing link none of it and their calls to
 * mk_* resolve to _core's own functions when they are loaded: one per-thread error buffer
 * (mk_error / mk_fail: a CUDA entry failing inside _core's Model or Trainer writes where
 * _core's binding reads), one thread count (mk.set_num_threads reaches the GEMMs the test
 * hooks run), one set of op tables and checks.
 *
 * Why this is safe: _core exports only PyInit__core and mk_* names
 * (tests/packaging/test_setup.py holds it), and _cuda and _testing are compiled with hidden
 * visibility (setup.py), so none of their own symbols can take the place of _core's, nor
 * _core's of theirs.
 *
 * An extension built from other sources than _core (one rebuilt, not the other) would
 * misread the shared structs: mk_check_engine compares the layout it was compiled with
 * against _core's before the module is created. */
#ifndef MANAKA_ENGINE_LINK_H
#define MANAKA_ENGINE_LINK_H
#include "python/common/binding.h"
#include "core/backend.h"
#include "core/batch.h"

/* The op table a backend argument names: a str ("cpu", "cpu_staged"; NULL: "cpu") or a
 * capsule of another extension's table (manaka._cuda); NULL with an exception set if
 * neither, or if the table is incomplete (model_binding.c). */
const mk_backend *mk_backend_from_arg(PyObject *arg);

/* The sizes of the structs the extensions share, as _core was compiled. */
typedef struct {
    size_t backend, batch;
} mk_engine_layout;
mk_engine_layout mk_engine_layout_of_core(void);

/* 0 when `who` ("manaka._testing") was compiled against the same structs as _core, else
 * -1 with ImportError. */
static inline int mk_check_engine(const char *who) {
    mk_engine_layout core = mk_engine_layout_of_core();
    if (core.backend == sizeof(mk_backend) && core.batch == sizeof(mk_batch)) return 0;
    PyErr_Format(PyExc_ImportError,
                 "%s was built against another manaka._core (mk_backend %zu bytes there, %zu "
                 "here; mk_batch %zu, %zu): rebuild both (python setup.py build_ext --inplace)",
                 who, core.backend, sizeof(mk_backend), core.batch, sizeof(mk_batch));
    return -1;
}
#endif
