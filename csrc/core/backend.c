/* The completeness check of an op table (linked into every extension that has one). */
#include <stddef.h>
#include <string.h>

#include "backend.h"

/* mk_backend is name, host_memory, then one function pointer per entry of backend_ops.def
 * and nothing else: a field added to the struct by hand would escape the check below. */
_Static_assert(sizeof(mk_backend) ==
                   offsetof(mk_backend, alloc) + MK_BACKEND_NUM_ENTRIES * sizeof(void (*)(void)),
               "mk_backend has a field that is not an entry of backend_ops.def");

mk_status mk_backend_check(const mk_backend *backend) {
    if (!backend) return mk_fail(MK_ERR_RUNTIME, "backend: no op table");
#define MK_OP(ret, entry, params)                                                        \
    if (!backend->entry)                                                                 \
        return mk_fail(MK_ERR_RUNTIME, "backend '%s' does not implement '%s'",           \
                       backend->name ? backend->name : "?", #entry);
#include "backend_ops.def"
#undef MK_OP
    return MK_OK;
}
