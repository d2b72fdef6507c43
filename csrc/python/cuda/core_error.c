/* manaka._cuda's mk_fail and mk_error: manaka._core's per-thread message, not a copy.
 *
 * The CUDA op table runs inside _core's engine: model.c and trainer.c (in _core) call its
 * entries, which are compiled here, and on failure _core's binding raises with _core's
 * mk_error(). With core/error.c linked into _cuda as well, an entry's mk_fail wrote into
 * _cuda's own thread-local buffer, and the user saw "manaka: unknown error" (or an older
 * message) for a device failure inside Model or Trainer. So _cuda links no error.c: these
 * two forward to the functions _core lends through the capsule manaka._core._api
 * (python/common/core_api.h), and _cuda's own binding reads the same buffer.
 *
 * Hidden, so that they can never stand in for _core's own (were _cuda loaded with
 * RTLD_GLOBAL, _core's calls would resolve here and call themselves). Before the module's
 * init has taken the capsule nothing can fail, but a local buffer keeps that case defined. */
#include "cuda_binding.h" /* Python.h first: it sets the feature macros */
#include "python/common/core_api.h"

#include <stdarg.h>
#include <stdio.h>

static const mk_core_api *core;
static _Thread_local char early[1024];

__attribute__((visibility("hidden"))) mk_status mk_fail(mk_status status, const char *fmt, ...) {
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(core ? message : early, sizeof message, fmt, args);
    va_end(args);
    return core ? core->fail(status, "%s", message) : status;
}

__attribute__((visibility("hidden"))) const char *mk_error(void) { return core ? core->error() : early; }

int mk_init_core_error(void) {
    const mk_core_api *api = mk_import_core_api("manaka._cuda");
    if (!api) return -1;
    core = api;
    return 0;
}
