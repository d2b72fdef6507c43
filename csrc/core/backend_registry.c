/* The op tables manaka._core holds, by name. */
#include <string.h>

#include "backend.h"

const mk_backend *mk_backend_get(const char *name) {
    const mk_backend *found = NULL;
    if (name && strcmp(name, "cpu") == 0) found = &mk_backend_cpu;
    if (name && strcmp(name, "cpu_staged") == 0) found = &mk_backend_cpu_staged;
    /* The CUDA table lives in manaka._cuda and reaches _core.Model as a capsule
     * (MK_BACKEND_CAPSULE), so _core never links CUDA. */
    if (!found) {
        mk_fail(MK_ERR_VALUE, "backend '%s' is not in this build (available: cpu)",
                name ? name : "(null)");
        return NULL;
    }
    return mk_backend_check(found) == MK_OK ? found : NULL;
}
