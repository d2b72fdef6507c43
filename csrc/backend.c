/* Backend registry and the completeness check of an op table. */
#include <stddef.h>
#include <string.h>

#include "backend.h"

/* A table entry added to mk_backend but not to MK_BACKEND_ENTRIES would escape the check
 * below: the size of the struct catches it at compile time. */
_Static_assert(sizeof(mk_backend) ==
                   offsetof(mk_backend, alloc) + MK_BACKEND_NUM_ENTRIES * sizeof(void (*)(void)),
               "mk_backend has an entry missing from MK_BACKEND_ENTRIES");

mk_status mk_backend_check(const mk_backend *backend) {
    if (!backend) return mk_fail(MK_ERR_RUNTIME, "backend: no op table");
#define MK_CHECK_ENTRY(entry)                                                            \
    if (!backend->entry)                                                                 \
        return mk_fail(MK_ERR_RUNTIME, "backend '%s' does not implement '%s'",           \
                       backend->name ? backend->name : "?", #entry);
    MK_BACKEND_ENTRIES(MK_CHECK_ENTRY)
#undef MK_CHECK_ENTRY
    return MK_OK;
}

const mk_backend *mk_backend_get(const char *name) {
    const mk_backend *found = NULL;
    if (name && strcmp(name, "cpu") == 0) found = &mk_backend_cpu;
    if (name && strcmp(name, "cpu_staged") == 0) found = &mk_backend_cpu_staged;
    /* a CUDA build registers its table here, e.g. under #ifdef MANAKA_CUDA:
     * if (name && strcmp(name, "cuda") == 0) found = &mk_backend_cuda; */
    if (!found) {
        mk_fail(MK_ERR_VALUE, "backend '%s' is not in this build (available: cpu)",
                name ? name : "(null)");
        return NULL;
    }
    return mk_backend_check(found) == MK_OK ? found : NULL;
}
