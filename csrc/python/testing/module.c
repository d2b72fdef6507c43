/* manaka._testing: the CPython module (testing.h says what it holds and why it is apart
 * from manaka._core). Its engine calls are _core's own (python/common/engine_link.h). */
#define MANAKA_BINDING_MAIN
#include "testing.h"

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "manaka._testing",
    "Test and benchmark hooks over manaka._core's op tables (not part of the API).", -1, NULL,
};

PyMODINIT_FUNC PyInit__testing(void) {
    import_array();
    if (mk_check_engine("manaka._testing") < 0) return NULL;
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
