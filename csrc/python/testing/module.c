/* manaka._testing: the CPython module (testing.h says what it holds and why it is apart
 * from manaka._core). Importing it imports manaka._core and takes its engine table. */
#define MANAKA_BINDING_MAIN
#include "testing.h"

const mk_core_api *mk_core;

/* binding.c's mk_raise_status and mk_raise_where read mk_error(): here it is _core's, the
 * buffer that _core's tables and engine write. Hidden, so that it can never stand in for
 * _core's own mk_error (were this module loaded with RTLD_GLOBAL, _core's calls would
 * resolve to it and it would call itself). */
__attribute__((visibility("hidden"))) const char *mk_error(void) { return mk_core->error(); }

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "manaka._testing",
    "Test and benchmark hooks over manaka._core's op tables (not part of the API).", -1, NULL,
};

PyMODINIT_FUNC PyInit__testing(void) {
    import_array();
    const mk_core_api *api = mk_import_core_api("manaka._testing");
    if (!api) return NULL;
    mk_core = api;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    if (mk_init_backend_probe(module) < 0 || mk_init_policy_head_probe(module) < 0 ||
        mk_init_gemm_probe(module) < 0 || mk_init_backend_layout(module) < 0 ||
        mk_init_toy_records(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
