/* The capsule manaka._core._api (core_api.h says why it exists): static data, like the op
 * tables it hands out, and CPython never unloads an extension, so the pointers stay valid
 * for as long as an importer holds them. */
#include "python/common/core_api.h"

static const mk_core_api core_api = {
    .size = sizeof(mk_core_api),
    .backend_size = sizeof(mk_backend),
    .batch_size = sizeof(mk_batch),
    .error = mk_error,
    .fail = mk_fail,
    .backend_from_arg = mk_backend_from_arg,
    .batch_check = mk_batch_check,
};

int mk_init_core_api(PyObject *module) {
    PyObject *capsule = PyCapsule_New((void *)&core_api, MK_CORE_API_CAPSULE, NULL);
    if (!capsule) return -1;
    int rc = PyModule_AddObjectRef(module, "_api", capsule);
    Py_DECREF(capsule);
    return rc;
}
