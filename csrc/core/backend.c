/* The completeness check of an op table (linked into every extension that has one). */
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
