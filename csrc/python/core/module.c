/* manaka._core: the CPython module. Each concern registers its own functions
 * (ops_binding.c, model_binding.c, loader_binding.c, records_binding.c, shogi_binding.c,
 * dataset_binding.c); manaka._cuda and manaka._testing call into this module's engine by
 * name (python/common/engine_link.h); this file only assembles them and answers
 * build_info(). The test hooks are not here: they are manaka._testing
 * (csrc/python/testing/), which the package never imports. */
#define MANAKA_BINDING_MAIN
#include "model_binding.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static PyObject *py_build_info(PyObject *self, PyObject *unused) {
#ifdef _OPENMP
    int openmp = _OPENMP;
#else
    int openmp = 0;
#endif
#if defined(__clang__)
    const char *compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *compiler = "gcc " __VERSION__;
#else
    const char *compiler = "unknown";
#endif
    return Py_BuildValue("{s:s,s:i,s:i}", "compiler", compiler, "openmp", openmp, "num_threads",
                         mk_get_num_threads());
}

static PyMethodDef module_methods[] = {
    {"build_info", py_build_info, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "manaka._core", "manaka's C core (CPU backend).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    if (mk_init_ops(module) < 0 || mk_init_model(module) < 0 || mk_init_loader(module) < 0 ||
        mk_init_records(module) < 0 || mk_init_shogi(module) < 0 || mk_init_hcpe3(module) < 0 || mk_init_dataset(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
